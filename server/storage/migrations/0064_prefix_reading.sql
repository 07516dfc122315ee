-- Words of spaced scripts other than Latin are read by their first four letters in the
-- english vector (issue 34).
--
-- The english configuration stems English only: a word of another spaced script keeps its
-- whole form there, so an inflection ("संभालता" / "संभालते", "الموارد" / "موارد",
-- "счета" / "счетов") shared no lexeme with its answer. `brain_truncate` reads such a word
-- in the english vector by its first four characters instead, the crudest stemmer there
-- is, once the attached Arabic article or conjunction is removed (ال، وال، بال، فال، كال،
-- لل, as Arabic light stemmers do); at the word's positions, so its term frequency is the
-- word's. `p_scripts`: the bracket-expression ranges whose words are truncated. Numbers,
-- addresses and paths (anything with an ASCII digit or punctuation) stay whole.
--
-- The exact-form (`simple`) vector keeps every word whole, and Latin-script words are read
-- as before (English stemmed; four letters were too few for Spanish on the dev split:
-- "contraseña" met "contabilidad"). Both sides read text through `brain_tsv`, so a query
-- is read the same way, and the term statistics (lexical_terms, per visibility cell,
-- migration 0010) count the stored lexemes whatever they are: exact per cell, no new
-- table. Measured in docs (Retrieval, Languages), with what was tried and not kept.
--
-- Cost: both lexical columns of memories and knowledge chunks are regenerated (a table
-- rewrite, as in 0050) and every tenant's statistics recounted: 2.5-2.9 s per 10,000
-- English memories, 2.3-5.5 s per 10,000 in eleven languages, in three runs on the shared
-- 2-core machine at load 5-8 (python -m brain.server.measure.lexical_backfill). Text
-- holding none of those scripts is stored exactly as before.
CREATE FUNCTION brain_truncate(p_tsv tsvector, p_scripts text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_words text[];
    v_prefixes text;
BEGIN
    IF p_tsv::text !~ ('[' || p_scripts || ']') THEN
        RETURN p_tsv;  -- the common case: no word of those scripts
    END IF;
    SELECT array_agg(w.lexeme),
           string_agg('''' || left(w.word, 4) || ''':' || array_to_string(w.positions, ','), ' ')
    INTO v_words, v_prefixes
    FROM (SELECT CASE WHEN u.lexeme ~ '^(وال|بال|فال|كال|لل|ال)[\u0600-\u06FF]{3,}$'
                      THEN regexp_replace(u.lexeme, '^(وال|بال|فال|كال|لل|ال)', '')
                      ELSE u.lexeme END AS word,
                 u.lexeme, u.positions
          FROM unnest(p_tsv) u) w
    WHERE char_length(w.lexeme) > 4
      AND w.word ~ ('^[' || p_scripts || ']+$');
    IF v_words IS NULL THEN
        RETURN p_tsv;
    END IF;
    RETURN ts_delete(p_tsv, v_words) || v_prefixes::tsvector;
END
$$;

CREATE OR REPLACE FUNCTION brain_tsv(p_config regconfig, p_text text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_segmented text := brain_segment(p_text);
    v_stops text[] := brain_function_lexemes(v_segmented);
    v_tsv tsvector;
BEGIN
    IF cardinality(v_stops) > 0 AND p_config <> 'simple'::regconfig THEN
        -- The same words as the configuration spells them (english: stemmed).
        v_stops := tsvector_to_array(to_tsvector(p_config, array_to_string(v_stops, ' ')));
    END IF;
    v_tsv := ts_delete(to_tsvector(p_config, v_segmented), v_stops);
    IF p_config = 'simple'::regconfig THEN
        RETURN v_tsv;
    END IF;
    -- Spaced scripts other than Latin: Greek to Sinhala, and Georgian.
    RETURN brain_truncate(v_tsv, '\u0370-\u0DFF\u10A0-\u10FF');
END
$$;

-- Regenerate the lexical columns (PostgreSQL 15 has no SET EXPRESSION), their indexes,
-- then recount the statistics.
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

SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants;
