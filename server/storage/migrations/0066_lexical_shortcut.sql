-- Ingest: the lexical columns cost half as much CPU when a text has no function word
-- of another language to remove (issue 31: the lexical commit bounded by the database).
--
-- Each chunk's (and memory's) two lexical columns are `brain_tsv('english', content)` and
-- `brain_tsv('simple', content)`; each call parsed the text twice, once for its vector
-- and once in `brain_function_lexemes` to find the function words of the text's language
-- (migration 0050). For most text, English prose and code, that second parse finds
-- nothing: no common function word of another Latin-script language (the voters) and no
-- Cyrillic, Arabic or Devanagari letter. Two regular expressions now say so before
-- parsing, and the function returns no lexemes at once, as the parse would have.
--
-- The vectors are exactly what they were (tests/test_lexical_shortcut.py compares the
-- previous definition with this one on the multilingual and knowledge sets and on edge
-- cases of the parser: hyphens, underscores, URLs, case), so no column is regenerated
-- and no statistic recounted. Measured in docs (Performance, Ingest): the two columns of
-- 5,639 generated chunks (3.3 MB) took 1.6-1.9 s of PostgreSQL CPU and take 0.8-1.2 s.

CREATE OR REPLACE FUNCTION brain_function_lexemes(p_segmented text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    -- The commonest function words of the other Latin-script languages: only a text
    -- holding one of them votes (a short constant: this runs on every write and query).
    v_voters constant text[] := ARRAY['de', 'la', 'el', 'los', 'las', 'que', 'del', 'le',
        'les', 'des', 'du', 'et', 'il', 'di', 'che', 'der', 'die', 'das', 'und', 'het', 'een',
        'da', 'não', 'em'];
    v_words text[];
    v_stops text[] := '{}';
    v_best text;
BEGIN
    -- Most text (English prose and code) holds no voter and none of the scripts below:
    -- then there is nothing to remove, found by two regular expressions instead of
    -- parsing the text. A voter is a lexeme of the simple parser only where the text
    -- (lowercased as the parser lowercases) holds it between non-alphanumerics, so this
    -- never skips a text the parse below would find one in.
    IF lower(p_segmented) !~ ('(^|[^[:alnum:]])(' || array_to_string(v_voters, '|')
                              || ')([^[:alnum:]]|$)')
       AND p_segmented !~ '[\u0400-\u04FF\u0600-\u06FF\u0900-\u097F]' THEN
        RETURN '{}';
    END IF;
    v_words := tsvector_to_array(to_tsvector('simple'::regconfig, p_segmented));
    IF cardinality(v_words) = 0 THEN
        RETURN '{}';
    END IF;
    IF v_words && v_voters THEN
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

