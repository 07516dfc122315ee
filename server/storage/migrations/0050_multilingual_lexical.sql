-- Every script matches lexically, and function words weigh nothing (issue 34).
--
-- PostgreSQL's parser splits text at spaces and punctuation, so a Chinese, Japanese or
-- Thai sentence was one "word" and no query term ever matched it. The lexical pipeline is
-- now one function, `brain_tsv(config, text)`, used by the generated columns of memories
-- and document chunks and by every query (storage/retrieval.py), so both sides always
-- read text the same way:
--
-- 1. `brain_segment`: runs of unspaced scripts (Han, kana, Hangul, Thai, Lao, Khmer,
--    Myanmar) become overlapping character bigrams (Thai: bigrams of letter clusters, a
--    base letter with its vowel and tone marks), split first at function words (Chinese
--    的 了 吗 是…, Japanese particles, Thai ที่ และ ของ…); common function bigrams
--    (我们, です, 합니…) and lone particles are dropped. Hangul words keep their particles
--    inside their bigrams (회의는 → 회의 의는), so "회의" finds them. Character n-grams
--    rather than a dictionary segmenter: measured in docs (Retrieval, Languages).
-- 2. `brain_function_lexemes`: the function words of the text's language are removed
--    from both vectors: Hindi, Arabic and Russian by script (fixed lists); for Latin
--    script, the language whose PostgreSQL stop list covers most of the text's words
--    (Spanish, French, Portuguese, Italian, German, Dutch) when it beats English, so
--    Spanish "de, la" never count as rare terms while an English "son" or "hat" stays.
--    English stop words stay as before: the english vector drops them, and the exact-form
--    lane reads content words only (storage/retrieval.py).
--
-- The columns are regenerated (PostgreSQL 15 has no SET EXPRESSION) and the term
-- statistics of every tenant recounted from the new vectors.

CREATE TEXT SEARCH DICTIONARY brain_stop_spanish (TEMPLATE = pg_catalog.simple, STOPWORDS = spanish);
CREATE TEXT SEARCH DICTIONARY brain_stop_french (TEMPLATE = pg_catalog.simple, STOPWORDS = french);
CREATE TEXT SEARCH DICTIONARY brain_stop_portuguese (TEMPLATE = pg_catalog.simple, STOPWORDS = portuguese);
CREATE TEXT SEARCH DICTIONARY brain_stop_italian (TEMPLATE = pg_catalog.simple, STOPWORDS = italian);
CREATE TEXT SEARCH DICTIONARY brain_stop_german (TEMPLATE = pg_catalog.simple, STOPWORDS = german);
CREATE TEXT SEARCH DICTIONARY brain_stop_dutch (TEMPLATE = pg_catalog.simple, STOPWORDS = dutch);
CREATE TEXT SEARCH DICTIONARY brain_stop_russian (TEMPLATE = pg_catalog.simple, STOPWORDS = russian);

-- One configuration per list: the simple parser and lowercasing, minus that list.
DO $$
DECLARE
    v_lang text;
BEGIN
    FOREACH v_lang IN ARRAY ARRAY['spanish', 'french', 'portuguese', 'italian', 'german',
                                  'dutch', 'russian'] LOOP
        EXECUTE format('CREATE TEXT SEARCH CONFIGURATION brain_stop_%s (COPY = pg_catalog.simple)',
                       v_lang);
        EXECUTE format('ALTER TEXT SEARCH CONFIGURATION brain_stop_%s '
                       'ALTER MAPPING REPLACE pg_catalog.simple WITH brain_stop_%s', v_lang, v_lang);
    END LOOP;
END
$$;

-- Unspaced scripts, as one bracket expression (a run of them is segmented).
CREATE FUNCTION brain_unspaced_class() RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT '\u0E00-\u0EFF\u1000-\u109F\u1100-\u11FF\u1780-\u17FF\u3040-\u30FF'
             '\u3130-\u318F\u31F0-\u31FF\u3400-\u4DBF\u4E00-\u9FFF\uAC00-\uD7AF'
             '\uF900-\uFAFF\uFF66-\uFF9F' $$;

-- N-grams of unspaced scripts that are function words: Chinese pronouns, demonstratives,
-- question words and connectives; Japanese endings, demonstratives and question words;
-- Korean endings, particles and question words.
CREATE FUNCTION brain_function_ngrams() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT ARRAY[
    -- Chinese
    '我', '你', '他', '她', '它', '这', '那', '有', '在', '和', '与', '就', '都', '也', '还',
    '要', '会', '不', '很', '吗', '么', '什', '谁', '哪', '几',
    '我们', '你们', '他们', '她们', '它们', '咱们', '这个', '那个', '这些', '那些', '这里',
    '那里', '什么', '怎么', '哪个', '哪些', '哪里', '哪儿', '为什', '多少', '几点', '时候',
    '是否', '已经', '还是', '但是', '因为', '所以', '如果', '可以', '没有', '一个', '自己',
    '就是', '不是', '也是', '都是', '请问', '知道', '我的', '一下', '现在',
    -- Japanese
    '何', 'です', 'ます', 'まし', 'した', 'でし', 'ませ', 'ない', 'ある', 'いる', 'する',
    'され', 'って', 'ので', 'から', 'まで', 'けど', 'など', 'この', 'その', 'あの', 'どの',
    'これ', 'それ', 'あれ', 'どれ', 'どこ', 'いつ', 'なに', 'なん', 'だれ', 'くだ', 'ださ',
    'さい', 'つい', 'いて', 'てい', 'いま', 'しょ', 'ょう', 'なり', 'りま', 'った', 'たち',
    '教え', 'えて',
    -- Korean
    '니다', '합니', '습니', '입니', '됩니', '했습', '있습', '나요', '세요', '어요', '아요',
    '에요', '예요', '까요', '인가', '가요', '에서', '으로', '에게', '하는', '있는', '하고',
    '그리', '리고', '무엇', '어디', '언제', '누구', '얼마', '무슨', '어떤', '어떻', '떻게',
    '우리', '저희', '했어', '였어', '이에'
]::text[] $$;

-- Text -> the same text with every run of an unspaced script replaced by its n-grams.
CREATE FUNCTION brain_segment(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_class text := brain_unspaced_class();
    v_out text[] := '{}';
    v_part text[];
    v_piece text;
    v_units text[];
    v_gram text;
    i int;
BEGIN
    IF p_text !~ ('[' || v_class || ']') THEN
        RETURN p_text;  -- the common case: nothing to segment
    END IF;
    FOR v_part IN SELECT regexp_matches(p_text, '([' || v_class || ']+)|([^' || v_class || ']+)', 'g')
    LOOP
        IF v_part[1] IS NULL THEN
            v_out := v_out || v_part[2];
            CONTINUE;
        END IF;
        -- Function words split a run: no bigram straddles them, and they are dropped.
        FOR v_piece IN SELECT regexp_split_to_table(v_part[1],
            '的|了|吗|呢|吧|啊|呀|嘛|是|は|が|を|に|の|で|と|も|へ|や|か|ね|よ|'
            'ที่ไหน|ที่|และ|ของ|เป็น|แล้ว|อยู่|อะไร|เมื่อไหร่|เมื่อไร|อย่างไร|ยังไง|ครับ|ค่ะ|คะ|'
            'ไหม|ไหน|ใคร|ทำไม|หรือ|ใน|ได้|ไม่|ให้|กับ|คือ')
        LOOP
            -- Units: a letter with the Thai vowel and tone marks around it, else one character.
            v_units := ARRAY(SELECT (regexp_matches(v_piece,
                '[\u0E40-\u0E44]?.[\u0E31\u0E34-\u0E3A\u0E47-\u0E4E]*', 'g'))[1]);
            IF cardinality(v_units) = 1 THEN
                -- A lone hiragana is a particle or an ending; other lone units count.
                IF v_units[1] !~ '^[\u3040-\u309F]$'
                   AND NOT v_units[1] = ANY(brain_function_ngrams()) THEN
                    v_out := v_out || v_units[1];
                END IF;
            ELSE
                FOR i IN 1 .. cardinality(v_units) - 1 LOOP
                    v_gram := v_units[i] || v_units[i + 1];
                    IF NOT v_gram = ANY(brain_function_ngrams()) THEN
                        v_out := v_out || v_gram;
                    END IF;
                END LOOP;
            END IF;
        END LOOP;
    END LOOP;
    RETURN array_to_string(v_out, ' ');
END
$$;

-- The lexemes (simple form) of segmented text that are function words of its language.
-- Latin script: each language votes with how many of its most frequent function words the
-- text holds (cheap); only a language that beats English has its whole PostgreSQL stop
-- list applied.
CREATE FUNCTION brain_function_lexemes(p_segmented text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_words text[] := tsvector_to_array(to_tsvector('simple'::regconfig, p_segmented));
    v_stops text[] := '{}';
    v_best text;
BEGIN
    IF cardinality(v_words) = 0 THEN
        RETURN '{}';
    END IF;
    -- Only a text holding one of the commonest function words of another Latin-script
    -- language votes (a short constant: this runs on every write and every query).
    IF v_words && ARRAY['de', 'la', 'el', 'los', 'las', 'que', 'del', 'le', 'les', 'des',
                        'du', 'et', 'il', 'di', 'che', 'der', 'die', 'das', 'und', 'het',
                        'een', 'da', 'não', 'em']::text[] THEN
        -- The language holding most of its words wins; English wins ties.
        SELECT v.lang INTO v_best FROM (VALUES
        ('english', ARRAY['the', 'and', 'of', 'to', 'a', 'in', 'is', 'it', 'that', 'was',
            'for', 'on', 'are', 'with', 'as', 'i', 'his', 'they', 'be', 'at', 'have', 'this',
            'from', 'or', 'had', 'by', 'but', 'not', 'what', 'all', 'were', 'we', 'when',
            'your', 'can', 'there', 'an', 'which', 'their', 'if', 'do', 'will', 'my', 'you',
            'he', 'she', 'me', 'so', 'did', 'been', 'has', 'would', 'how', 'about']::text[]),
        ('spanish', ARRAY['el', 'la', 'los', 'las', 'de', 'del', 'que', 'y', 'en', 'un', 'una',
            'es', 'por', 'con', 'para', 'se', 'su', 'al', 'lo', 'como', 'más', 'pero', 'sus',
            'le', 'ya', 'este', 'porque', 'esta', 'entre', 'cuando', 'muy', 'sin', 'sobre',
            'también', 'hasta', 'hay', 'donde', 'quien', 'desde', 'nos', 'qué', 'dónde',
            'cuándo', 'quién', 'está', 'están', 'fue']::text[]),
        ('french', ARRAY['le', 'la', 'les', 'de', 'des', 'du', 'et', 'en', 'un', 'une', 'est',
            'que', 'qui', 'dans', 'pour', 'pas', 'sur', 'au', 'aux', 'avec', 'ce', 'il',
            'elle', 'nous', 'vous', 'ils', 'sont', 'par', 'plus', 'mais', 'ou', 'où', 'son',
            'sa', 'ses', 'été', 'être', 'était', 'quand', 'comment', 'quel', 'quelle']::text[]),
        ('portuguese', ARRAY['o', 'a', 'os', 'as', 'de', 'do', 'da', 'dos', 'das', 'em', 'no',
            'na', 'nos', 'nas', 'um', 'uma', 'que', 'e', 'é', 'para', 'com', 'não', 'por',
            'se', 'mais', 'ao', 'à', 'foi', 'são', 'seu', 'sua', 'ele', 'ela', 'quando',
            'onde', 'quem', 'qual', 'está', 'pelo', 'pela']::text[]),
        ('italian', ARRAY['il', 'lo', 'la', 'i', 'gli', 'le', 'di', 'del', 'della', 'dei',
            'delle', 'che', 'e', 'è', 'un', 'una', 'per', 'in', 'non', 'con', 'si', 'da', 'al',
            'alla', 'sono', 'ma', 'come', 'anche', 'nel', 'nella', 'questo', 'quando', 'dove',
            'chi', 'quale', 'sul', 'sulla']::text[]),
        ('german', ARRAY['der', 'die', 'das', 'den', 'dem', 'des', 'und', 'ist', 'nicht',
            'ein', 'eine', 'einen', 'zu', 'mit', 'sich', 'auf', 'für', 'im', 'von', 'wird',
            'sind', 'auch', 'es', 'an', 'werden', 'aus', 'er', 'sie', 'wir', 'bei', 'wie',
            'oder', 'wann', 'wo', 'wer', 'ich', 'noch', 'nach', 'zum', 'zur', 'am', 'war']::text[]),
        ('dutch', ARRAY['de', 'het', 'een', 'en', 'van', 'in', 'is', 'op', 'te', 'dat', 'die',
            'voor', 'met', 'zijn', 'niet', 'aan', 'er', 'maar', 'om', 'ook', 'als', 'bij',
            'nog', 'wordt', 'naar', 'wat', 'wanneer', 'waar', 'wie', 'hoe', 'deze', 'dit',
            'ze', 'we', 'ik', 'heeft', 'worden']::text[])
        ) AS v(lang, words)
        ORDER BY (SELECT count(*) FROM unnest(v_words) w WHERE w = ANY(v.words)) DESC,
                 v.lang = 'english' DESC
        LIMIT 1;
    END IF;
    IF v_best <> 'english' THEN
        v_stops := ARRAY(
            SELECT unnest(v_words) EXCEPT SELECT unnest(tsvector_to_array(
                to_tsvector(('brain_stop_' || v_best)::regconfig, p_segmented))));
    END IF;
    IF p_segmented ~ '[\u0400-\u04FF]' THEN  -- Cyrillic: Russian
        v_stops := v_stops || ARRAY(
            SELECT unnest(v_words) EXCEPT SELECT unnest(tsvector_to_array(
                to_tsvector('brain_stop_russian'::regconfig, p_segmented))));
    END IF;
    IF p_segmented !~ '[\u0600-\u06FF\u0900-\u097F]' THEN
        RETURN v_stops;
    END IF;
    -- Scripts that name their language: Hindi (Devanagari), Arabic.
    RETURN v_stops || ARRAY(SELECT w FROM unnest(v_words) w WHERE w = ANY(ARRAY[
        'का', 'के', 'की', 'को', 'में', 'से', 'है', 'हैं', 'था', 'थे', 'थी', 'पर', 'और', 'या',
        'भी', 'तो', 'ही', 'एक', 'यह', 'वह', 'ये', 'वो', 'क्या', 'कब', 'कहाँ', 'कहां', 'कौन',
        'कैसे', 'किस', 'किसने', 'कितने', 'कितना', 'कितनी', 'इस', 'उस', 'इसे', 'उसे', 'हम', 'आप',
        'मैं', 'मेरा', 'मेरी', 'मेरे', 'हमारा', 'हमारी', 'हमारे', 'आपका', 'आपकी', 'आपके',
        'अपना', 'अपनी', 'अपने', 'गया', 'गई', 'गए', 'हो', 'होगा', 'होगी', 'होता', 'होती',
        'रहा', 'रही', 'रहे', 'लिए', 'द्वारा', 'साथ', 'तक', 'जो', 'कि', 'ने', 'वाला', 'वाली',
        'वाले', 'नहीं', 'हुआ', 'हुई', 'हुए', 'किया', 'करें', 'करना', 'बताइए', 'बताओ',
        'في', 'من', 'إلى', 'الى', 'على', 'عن', 'مع', 'هذا', 'هذه', 'ذلك', 'تلك', 'التي',
        'الذي', 'الذين', 'هو', 'هي', 'هم', 'نحن', 'أنا', 'أنت', 'كان', 'كانت', 'يكون', 'ما',
        'ماذا', 'متى', 'أين', 'كيف', 'لماذا', 'هل', 'كم', 'أي', 'و', 'أو', 'ثم', 'قد', 'لا',
        'لم', 'لن', 'إن', 'أن', 'كل', 'بين', 'حتى', 'أيضا', 'فقط', 'لدينا', 'لنا', 'عند'
    ]::text[]));
END
$$;

-- What a lexical lane stores and queries: `config` ('english' or 'simple') over the
-- segmented text, less the function words of its language.
CREATE FUNCTION brain_tsv(p_config regconfig, p_text text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_segmented text := brain_segment(p_text);
    v_stops text[] := brain_function_lexemes(v_segmented);
BEGIN
    IF cardinality(v_stops) > 0 AND p_config <> 'simple'::regconfig THEN
        -- The same words as the configuration spells them (english: stemmed).
        v_stops := tsvector_to_array(to_tsvector(p_config, array_to_string(v_stops, ' ')));
    END IF;
    RETURN ts_delete(to_tsvector(p_config, v_segmented), v_stops);
END
$$;

-- Regenerate the lexical columns with the pipeline, then their indexes.
ALTER TABLE memories DROP COLUMN search_tsv, DROP COLUMN search_tsv_simple;
ALTER TABLE memories
    ADD COLUMN search_tsv tsvector
        GENERATED ALWAYS AS (brain_tsv('english'::regconfig, content)) STORED,
    ADD COLUMN search_tsv_simple tsvector
        GENERATED ALWAYS AS (brain_tsv('simple'::regconfig, content)) STORED;
CREATE INDEX memories_tsv ON memories USING gin (search_tsv);
CREATE INDEX memories_tsv_simple ON memories USING gin (search_tsv_simple);

ALTER TABLE document_chunks DROP COLUMN search_tsv, DROP COLUMN search_tsv_simple;
ALTER TABLE document_chunks
    ADD COLUMN search_tsv tsvector
        GENERATED ALWAYS AS (brain_tsv('english'::regconfig, content)) STORED,
    ADD COLUMN search_tsv_simple tsvector
        GENERATED ALWAYS AS (brain_tsv('simple'::regconfig, content)) STORED;
CREATE INDEX document_chunks_tsv ON document_chunks USING gin (search_tsv);
CREATE INDEX document_chunks_tsv_simple ON document_chunks USING gin (search_tsv_simple);

-- The term statistics count the new lexemes.
SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants;
