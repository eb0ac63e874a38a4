"""Append-only numbered schema migrations. Never edit a released one; add the next number."""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, str], ...] = (
    (
        1,
        """
        CREATE TABLE calls (
            key TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            purpose TEXT NOT NULL,
            request_json TEXT NOT NULL,
            text TEXT,
            error TEXT,
            scores_json TEXT,
            prompt_tokens INTEGER NOT NULL DEFAULT 0,
            completion_tokens INTEGER NOT NULL DEFAULT 0,
            latency REAL NOT NULL DEFAULT 0,
            attempts INTEGER NOT NULL DEFAULT 1,
            created_at TEXT NOT NULL
        );
        CREATE TABLE runs (
            id TEXT PRIMARY KEY,
            benchmark TEXT NOT NULL,
            benchmark_spec TEXT NOT NULL,
            model TEXT NOT NULL,
            options_json TEXT NOT NULL,
            dataset_sha256 TEXT NOT NULL,
            package_version TEXT NOT NULL,
            gen_params_json TEXT NOT NULL,
            data_source TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TABLE samples (
            benchmark TEXT NOT NULL,
            dataset_sha256 TEXT NOT NULL,
            sample_id TEXT NOT NULL,
            idx INTEGER NOT NULL,
            sample_json TEXT NOT NULL,
            PRIMARY KEY (benchmark, dataset_sha256, sample_id)
        );
        CREATE TABLE answers (
            run_id TEXT NOT NULL REFERENCES runs(id),
            sample_id TEXT NOT NULL,
            request_key TEXT NOT NULL,
            prompt_json TEXT NOT NULL,
            PRIMARY KEY (run_id, sample_id)
        );
        CREATE TABLE graders (
            fingerprint TEXT PRIMARY KEY,
            spec_json TEXT NOT NULL
        );
        CREATE TABLE grades (
            run_id TEXT NOT NULL REFERENCES runs(id),
            grader_fp TEXT NOT NULL REFERENCES graders(fingerprint),
            sample_id TEXT NOT NULL,
            value REAL,
            n_unknown INTEGER NOT NULL DEFAULT 0,
            grade_json TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, grader_fp, sample_id)
        );
        CREATE TABLE results (
            run_id TEXT NOT NULL REFERENCES runs(id),
            grader_fp TEXT NOT NULL,
            result_json TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (run_id, grader_fp)
        );
        CREATE TABLE reviews (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            grader_fp TEXT NOT NULL,
            sample_id TEXT NOT NULL,
            criterion_id TEXT NOT NULL DEFAULT '',
            reviewer TEXT NOT NULL,
            verdict TEXT,
            score REAL,
            reason TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL
        );
        CREATE INDEX grades_sample ON grades(sample_id);
        CREATE INDEX reviews_target ON reviews(run_id, sample_id);
        """,
    ),
    (
        2,
        """
        CREATE TABLE review_queue (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            run_id TEXT NOT NULL,
            grader_fp TEXT NOT NULL,
            sample_id TEXT NOT NULL,
            criterion_id TEXT NOT NULL DEFAULT '',
            reason TEXT NOT NULL,
            seed INTEGER,
            created_at TEXT NOT NULL,
            UNIQUE (run_id, grader_fp, sample_id, criterion_id)
        );
        CREATE INDEX reviews_criterion ON reviews(run_id, grader_fp, sample_id, criterion_id)
        """,
    ),
    (
        3,
        """
        ALTER TABLE calls ADD COLUMN finish_reason TEXT
        """,
    ),
    (
        4,
        """
        CREATE TABLE judge_agreement (
            key TEXT PRIMARY KEY,
            suite TEXT NOT NULL,
            judge TEXT NOT NULL,
            judge_params_json TEXT NOT NULL,
            protocol TEXT NOT NULL,
            prompt TEXT NOT NULL,
            dataset_sha256 TEXT NOT NULL,
            n_rows INTEGER NOT NULL,
            summary_json TEXT NOT NULL,
            metrics_json TEXT NOT NULL,
            verdicts_json TEXT NOT NULL,
            package_version TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX judge_agreement_judge ON judge_agreement(judge)
        """,
    ),
    (
        5,
        """
        CREATE TABLE batches (
            id INTEGER PRIMARY KEY AUTOINCREMENT,
            provider TEXT NOT NULL,
            endpoint TEXT NOT NULL,
            batch_id TEXT NOT NULL,
            state TEXT NOT NULL,
            keys_json TEXT NOT NULL,
            counts_json TEXT NOT NULL DEFAULT '{}',
            detail TEXT NOT NULL DEFAULT '',
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            collected_at TEXT,
            UNIQUE (provider, endpoint, batch_id)
        );
        CREATE INDEX batches_open ON batches(provider, endpoint, collected_at);
        CREATE TABLE batch_requests (
            batch INTEGER NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
            key TEXT NOT NULL,
            attempt INTEGER NOT NULL,
            request_json TEXT NOT NULL,
            PRIMARY KEY (batch, key)
        )
        """,
    ),
    (
        6,
        """
        CREATE TABLE leases (
            key TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            expires_at REAL NOT NULL
        )
        """,
    ),
    (
        7,
        # The judge calls behind each grade, so a result's tokens and cost are summed in SQL (a run
        # keeps no list of its calls). Filled for the grades already stored: the calls named by
        # each vote (criterion votes, then whole-answer votes), then those the grade lists alone.
        """
        CREATE TABLE grade_calls (
            run_id TEXT NOT NULL,
            grader_fp TEXT NOT NULL,
            sample_id TEXT NOT NULL,
            key TEXT NOT NULL,
            judge TEXT,
            PRIMARY KEY (run_id, grader_fp, sample_id, key)
        );
        INSERT OR IGNORE INTO grade_calls
            SELECT g.run_id, g.grader_fp, g.sample_id, k.value, json_extract(vt.value, '$.judge')
            FROM grades g, json_each(g.grade_json, '$.verdicts') vd, json_each(vd.value, '$.votes') vt,
                 json_each(vt.value, '$.keys') k;
        INSERT OR IGNORE INTO grade_calls
            SELECT g.run_id, g.grader_fp, g.sample_id, k.value, json_extract(vt.value, '$.judge')
            FROM grades g, json_each(g.grade_json, '$.votes') vt, json_each(vt.value, '$.keys') k;
        INSERT OR IGNORE INTO grade_calls
            SELECT g.run_id, g.grader_fp, g.sample_id, k.value, NULL
            FROM grades g, json_each(g.grade_json, '$.judge_keys') k;
        -- What usage and truncation counts read of a call, without reading the call's texts.
        CREATE INDEX calls_usage ON calls(key, prompt_tokens, completion_tokens, error, finish_reason);
        -- Data files read in full and found good (by their bytes, benchmark, limit, encoding and code version).
        CREATE TABLE checked_data (
            key TEXT PRIMARY KEY,
            n_samples INTEGER NOT NULL,
            checked_at TEXT NOT NULL
        )
        """,
    ),
    (
        8,
        # Gradings that finished with their result stored, and what a re-run would find in their
        # grades (how many, how many it would redo, how many by status), so the re-run of a
        # finished command reads the result back instead of every grade. Any grade written after
        # under the same run and grader deletes the row (GradeTables.put_grade).
        """
        CREATE TABLE settled (
            run_id TEXT NOT NULL,
            grader_fp TEXT NOT NULL,
            tally_json TEXT NOT NULL,
            settled_at TEXT NOT NULL,
            PRIMARY KEY (run_id, grader_fp)
        )
        """,
    ),
    (
        9,
        # Agents: the tool calls a reply asked for (JSON list, NULL for a plain reply), and each
        # episode's steps as they happen (one row per run, sample and epoch, rewritten after every
        # step, so an interrupted episode shows how far it got).
        """
        ALTER TABLE calls ADD COLUMN tool_calls_json TEXT;
        CREATE TABLE episodes (
            run_id TEXT NOT NULL,
            sample_id TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            status TEXT NOT NULL,
            steps_json TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (run_id, sample_id, epoch)
        )
        """,
    ),
    (
        10,
        # What the server said answered each call (its system_fingerprint, and the model it named
        # where that differs from the one asked); NULL where it said nothing. Not part of any key.
        """
        ALTER TABLE calls ADD COLUMN system_fingerprint TEXT
        """,
    ),
    (
        11,
        # Shards: the parts of a run asked by separate workers (``--shard i/N``), recorded with the
        # run and never in its id; a merge checks that every part of a run is there and finished.
        """
        CREATE TABLE shards (
            run_id TEXT NOT NULL,
            grader_fp TEXT NOT NULL,
            shard INTEGER NOT NULL,
            n_shards INTEGER NOT NULL,
            assign TEXT NOT NULL,
            n_samples INTEGER NOT NULL,
            n_graded INTEGER NOT NULL,
            state TEXT NOT NULL,
            host TEXT NOT NULL,
            package_version TEXT NOT NULL,
            started_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            PRIMARY KEY (run_id, grader_fp, shard, n_shards)
        )
        """,
    ),
)
