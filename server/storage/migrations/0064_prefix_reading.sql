-- The exact-form lane also reads each word by its first four characters (issue 34).
--
-- Only English is stemmed (the `english` lane): a Russian, German, French or Hindi word
-- in another inflection ("счета" / "счёт", "Lieferanten" / "Lieferantenrechnungen",
-- "piraté" / "piratage") shared no lexeme with its answer. The `simple` vector now holds,
-- beside the exact forms, a *prefix lexeme* for every content word of four characters or
-- more that is made of letters: its first four characters and a tilde ("lief~"), at the
-- word's positions (so its term frequency is the word's). The tilde keeps prefixes apart
-- from exact words ("meet" never matches "meet~"), and no function word has one (English
-- stop words, and the function words of the text's language, removed before). Runs of
-- unspaced scripts are already character bigrams and get none; nor do numbers, e-mail
-- addresses, paths or hyphenated forms (anything holding an ASCII digit or punctuation).
--
-- Both sides read text through `brain_tsv`, so queries get the same prefixes, and the
-- term statistics (lexical_terms, per visibility cell, migration 0010) count them like
-- any stored lexeme: they stay exact per cell with no new table. Measured in docs
-- (Retrieval, Languages).
--
-- Cost: the `simple` columns of memories and knowledge chunks are regenerated (a table
-- rewrite) and every tenant's statistics recounted; see docs for the figure per 10,000
-- memories.

CREATE OR REPLACE FUNCTION brain_tsv(p_config regconfig, p_text text) RETURNS tsvector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE STRICT SET search_path = pg_catalog, public
AS $$
DECLARE
    v_segmented text := brain_segment(p_text);
    v_stops text[] := brain_function_lexemes(v_segmented);
    v_tsv tsvector;
    v_prefixes text;
BEGIN
    IF cardinality(v_stops) > 0 AND p_config <> 'simple'::regconfig THEN
        -- The same words as the configuration spells them (english: stemmed).
        v_stops := tsvector_to_array(to_tsvector(p_config, array_to_string(v_stops, ' ')));
    END IF;
    v_tsv := ts_delete(to_tsvector(p_config, v_segmented), v_stops);
    IF p_config <> 'simple'::regconfig THEN
        RETURN v_tsv;
    END IF;
    -- Prefix lexemes: letters only (no ASCII digit or punctuation, so no quote or
    -- backslash reaches the literal), no unspaced script, not an English stop word.
    SELECT string_agg('''' || left(u.lexeme, 4) || '~'':'
                      || array_to_string(u.positions, ','), ' ')
    INTO v_prefixes
    FROM unnest(v_tsv) u
    WHERE char_length(u.lexeme) >= 4
      AND u.lexeme !~ '[\u0021-\u0040\u005B-\u0060\u007B-\u007E]'
      AND u.lexeme !~ ('[' || brain_unspaced_class() || ']')
      AND ts_lexize('english_stem', u.lexeme) IS DISTINCT FROM '{}'::text[];
    IF v_prefixes IS NULL THEN
        RETURN v_tsv;
    END IF;
    RETURN v_tsv || v_prefixes::tsvector;
END
$$;

-- Regenerate the exact-form columns (PostgreSQL 15 has no SET EXPRESSION), their indexes,
-- then recount the statistics.
ALTER TABLE memories DROP COLUMN search_tsv_simple;
ALTER TABLE memories
    ADD COLUMN search_tsv_simple tsvector
        GENERATED ALWAYS AS (brain_tsv('simple'::regconfig, content)) STORED;
CREATE INDEX memories_tsv_simple ON memories USING gin (search_tsv_simple);

ALTER TABLE document_chunks DROP COLUMN search_tsv_simple;
ALTER TABLE document_chunks
    ADD COLUMN search_tsv_simple tsvector
        GENERATED ALWAYS AS (brain_tsv('simple'::regconfig, content)) STORED;
CREATE INDEX document_chunks_tsv_simple ON document_chunks USING gin (search_tsv_simple);

SELECT brain_rebuild_lexical_stats(tenant_id) FROM tenants;
