"""The team store's schema in PostgreSQL: append-only numbered migrations, as the SQLite store's.

The tables the readers query mirror the SQLite store's (same names, same columns in the same
order, the JSON columns the same text), so the store's own read methods serve both
(:mod:`grandrounds.store.team.connection`). Differences, each for a reason: text columns use the
``C`` collation (byte order, as SQLite sorts), ``REAL`` is ``double precision`` (SQLite's REAL is 8
bytes), ``grade_calls`` keeps the order rows were published in (``seq``, in place of SQLite's
rowid), ``reviews`` carries a ``digest`` of its content so publishing the same review twice adds
it once, and images are a table of their bytes (``images``: one row per distinct image, the
sha256 of its bytes as key), so one ``pg_dump`` holds everything, and ``published_runs`` remembers
each state of a run already published whole (a signature of its rows in the store), so publishing
it again skips it without sending its rows. SQLite's ``json_valid``,
``json_extract``, ``json_array_length``, ``instr`` and a ``sum`` over booleans are defined as
functions, so the store's SQL reads the same here. The call cache stays in SQLite: ``calls``
holds only the calls behind published answers, grades and episodes.
"""

from __future__ import annotations

_T = 'text COLLATE "C"'

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        f"""
        CREATE FUNCTION json_parses(doc text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS $$
        BEGIN
            PERFORM doc::jsonb;
            RETURN true;
        EXCEPTION WHEN others THEN
            RETURN false;
        END $$;
        -- The JSON columns hold what the store wrote with its canonical JSON writer: JSON, except
        -- the NaN and Infinity an older version let through. Only a document that holds one of
        -- those words is parsed to tell (a parse in an exception block costs a subtransaction).
        CREATE FUNCTION json_valid(doc text) RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
            SELECT CASE WHEN doc IS NULL THEN NULL
                        WHEN strpos(doc, 'NaN') = 0 AND strpos(doc, 'Infinity') = 0
                             AND left(doc, 1) IN ('{{', '[', '"') THEN true
                        ELSE json_parses(doc) END
        $$;
        CREATE FUNCTION json_path(path text) RETURNS text[] LANGUAGE sql IMMUTABLE AS $$
            SELECT CASE WHEN path = '$' THEN ARRAY[]::text[]
                        ELSE string_to_array(substr(path, 3), '.') END
        $$;
        -- json, not jsonb: reading one value of a document a row holds is faster without
        -- building the whole binary document first
        CREATE FUNCTION json_extract(doc text, path text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
            SELECT doc::json #>> json_path(path)
        $$;
        CREATE FUNCTION json_array_length(doc text, path text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
            SELECT CASE WHEN j IS NULL THEN NULL WHEN json_typeof(j) = 'array'
                        THEN json_array_length(j) ELSE 0 END
            FROM (SELECT doc::json #> json_path(path) AS j) AS found
        $$;
        CREATE FUNCTION instr(haystack text, needle text) RETURNS integer LANGUAGE sql IMMUTABLE AS $$
            SELECT strpos(haystack, needle)
        $$;
        CREATE FUNCTION bool_count(n bigint, b boolean) RETURNS bigint LANGUAGE sql IMMUTABLE STRICT AS $$
            SELECT n + b::int
        $$;
        CREATE AGGREGATE sum(boolean) (SFUNC = bool_count, STYPE = bigint, INITCOND = '0');
        CREATE TABLE calls (
            key {_T} PRIMARY KEY,
            provider {_T} NOT NULL,
            model {_T} NOT NULL,
            purpose {_T} NOT NULL,
            request_json {_T} NOT NULL,
            text {_T},
            error {_T},
            scores_json {_T},
            prompt_tokens bigint NOT NULL DEFAULT 0,
            completion_tokens bigint NOT NULL DEFAULT 0,
            latency double precision NOT NULL DEFAULT 0,
            attempts bigint NOT NULL DEFAULT 1,
            created_at {_T} NOT NULL,
            finish_reason {_T},
            tool_calls_json {_T},
            system_fingerprint {_T}
        );
        CREATE TABLE runs (
            id {_T} PRIMARY KEY,
            benchmark {_T} NOT NULL,
            benchmark_spec {_T} NOT NULL,
            model {_T} NOT NULL,
            options_json {_T} NOT NULL,
            dataset_sha256 {_T} NOT NULL,
            package_version {_T} NOT NULL,
            gen_params_json {_T} NOT NULL,
            data_source {_T} NOT NULL,
            created_at {_T} NOT NULL
        );
        CREATE TABLE samples (
            benchmark {_T} NOT NULL,
            dataset_sha256 {_T} NOT NULL,
            sample_id {_T} NOT NULL,
            idx bigint NOT NULL,
            sample_json {_T} NOT NULL,
            PRIMARY KEY (benchmark, dataset_sha256, sample_id)
        );
        CREATE TABLE answers (
            run_id {_T} NOT NULL REFERENCES runs(id),
            sample_id {_T} NOT NULL,
            request_key {_T} NOT NULL,
            prompt_json {_T} NOT NULL,
            PRIMARY KEY (run_id, sample_id)
        );
        CREATE TABLE graders (
            fingerprint {_T} PRIMARY KEY,
            spec_json {_T} NOT NULL
        );
        CREATE TABLE grades (
            run_id {_T} NOT NULL REFERENCES runs(id),
            grader_fp {_T} NOT NULL REFERENCES graders(fingerprint),
            sample_id {_T} NOT NULL,
            value double precision,
            n_unknown bigint NOT NULL DEFAULT 0,
            grade_json {_T} NOT NULL,
            created_at {_T} NOT NULL,
            -- what the readers count of each grade, worked out once as it is written
            status {_T} GENERATED ALWAYS AS (
                CASE WHEN json_valid(grade_json) THEN json_extract(grade_json, '$.status') END
            ) STORED,
            n_verdicts bigint GENERATED ALWAYS AS (
                CASE WHEN json_valid(grade_json) THEN json_array_length(grade_json, '$.verdicts') END
            ) STORED,
            judge_failed boolean GENERATED ALWAYS AS (
                strpos(grade_json, '"error":"judge call failed') > 0
            ) STORED,
            PRIMARY KEY (run_id, grader_fp, sample_id)
        );
        CREATE TABLE results (
            run_id {_T} NOT NULL REFERENCES runs(id),
            grader_fp {_T} NOT NULL,
            result_json {_T} NOT NULL,
            created_at {_T} NOT NULL,
            PRIMARY KEY (run_id, grader_fp)
        );
        CREATE TABLE settled (
            run_id {_T} NOT NULL,
            grader_fp {_T} NOT NULL,
            tally_json {_T} NOT NULL,
            settled_at {_T} NOT NULL,
            PRIMARY KEY (run_id, grader_fp)
        );
        CREATE TABLE grade_calls (
            run_id {_T} NOT NULL,
            grader_fp {_T} NOT NULL,
            sample_id {_T} NOT NULL,
            key {_T} NOT NULL,
            judge {_T},
            seq bigserial,
            PRIMARY KEY (run_id, grader_fp, sample_id, key)
        );
        CREATE TABLE episodes (
            run_id {_T} NOT NULL,
            sample_id {_T} NOT NULL,
            epoch bigint NOT NULL,
            status {_T} NOT NULL,
            steps_json {_T} NOT NULL,
            updated_at {_T} NOT NULL,
            PRIMARY KEY (run_id, sample_id, epoch)
        );
        CREATE TABLE reviews (
            id bigserial PRIMARY KEY,
            run_id {_T} NOT NULL,
            grader_fp {_T} NOT NULL,
            sample_id {_T} NOT NULL,
            criterion_id {_T} NOT NULL DEFAULT '',
            reviewer {_T} NOT NULL,
            verdict {_T},
            score double precision,
            reason {_T} NOT NULL DEFAULT '',
            created_at {_T} NOT NULL,
            digest {_T} NOT NULL UNIQUE
        );
        CREATE TABLE review_queue (
            id bigserial PRIMARY KEY,
            run_id {_T} NOT NULL,
            grader_fp {_T} NOT NULL,
            sample_id {_T} NOT NULL,
            criterion_id {_T} NOT NULL DEFAULT '',
            reason {_T} NOT NULL,
            seed bigint,
            created_at {_T} NOT NULL,
            UNIQUE (run_id, grader_fp, sample_id, criterion_id)
        );
        CREATE TABLE judge_agreement (
            key {_T} PRIMARY KEY,
            suite {_T} NOT NULL,
            judge {_T} NOT NULL,
            judge_params_json {_T} NOT NULL,
            protocol {_T} NOT NULL,
            prompt {_T} NOT NULL,
            dataset_sha256 {_T} NOT NULL,
            n_rows bigint NOT NULL,
            summary_json {_T} NOT NULL,
            metrics_json {_T} NOT NULL,
            verdicts_json {_T} NOT NULL,
            package_version {_T} NOT NULL,
            created_at {_T} NOT NULL
        );
        CREATE TABLE images (
            sha256 {_T} PRIMARY KEY,
            media_type {_T} NOT NULL,
            data bytea NOT NULL
        );
        CREATE TABLE published_runs (
            run_id {_T} NOT NULL,
            signature {_T} NOT NULL,
            published_at {_T} NOT NULL,
            PRIMARY KEY (run_id, signature)
        );
        CREATE INDEX grades_sample ON grades(sample_id);
        CREATE INDEX reviews_target ON reviews(run_id, sample_id);
        CREATE INDEX reviews_criterion ON reviews(run_id, grader_fp, sample_id, criterion_id);
        CREATE INDEX judge_agreement_judge ON judge_agreement(judge);
        CREATE INDEX episodes_run ON episodes(run_id, status);
        CREATE INDEX results_created ON results(created_at)
        """,
    ),
)

#: The newest team schema this code knows; a database past it is refused.
SCHEMA_VERSION = max(v for v, _ in MIGRATIONS)
