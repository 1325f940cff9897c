-- The pass a winner belongs to: 'forward' (the layer's forward kernels, every
-- winner before this version) or 'backward' (flytune search --pass backward:
-- the backward program of a bucket). The pass joins the winners' key, so a
-- bucket holds a forward and a backward layer winner side by side. A
-- measurement needs no such column: it measures a variants row, whose kind
-- says its pass. SQLite cannot change a primary key, so the table is rebuilt
-- (the runner checks every key before it commits); the view winner_details
-- reads it and is recreated with the pass.
DROP VIEW winner_details;

CREATE TABLE winners_v3 (
  problem_id         INTEGER NOT NULL REFERENCES problems (id),
  device_id          INTEGER NOT NULL REFERENCES devices (id),
  tokens             INTEGER NOT NULL CHECK (tokens > 0),
  kind               TEXT NOT NULL,
  variant_id         INTEGER NOT NULL REFERENCES variants (id),
  run_id             INTEGER NOT NULL REFERENCES runs (id),
  median_us          REAL NOT NULL,
  p10_us             REAL,
  p90_us             REAL,
  default_variant_id INTEGER REFERENCES variants (id),
  speedup_vs_default REAL,
  chosen_at          TEXT NOT NULL,
  pass               TEXT NOT NULL DEFAULT 'forward' CHECK (pass IN ('forward', 'backward')),
  PRIMARY KEY (problem_id, device_id, tokens, kind, pass)
) STRICT;
INSERT INTO winners_v3 (problem_id, device_id, tokens, kind, variant_id, run_id, median_us, p10_us, p90_us,
                        default_variant_id, speedup_vs_default, chosen_at)
SELECT problem_id, device_id, tokens, kind, variant_id, run_id, median_us, p10_us, p90_us, default_variant_id,
       speedup_vs_default, chosen_at FROM winners;
DROP TABLE winners;
ALTER TABLE winners_v3 RENAME TO winners;

-- Winners with names instead of ids, for reading in sqlite3.
CREATE VIEW winner_details AS
SELECT p.key AS problem, d.name AS device, d.arch AS arch, w.pass, w.tokens, w.kind, v.kernel_name, w.median_us,
       w.p10_us, w.p90_us, w.speedup_vs_default, t.backend || ' ' || t.version AS toolchain, w.run_id, w.chosen_at
FROM winners AS w
JOIN problems AS p ON p.id = w.problem_id
JOIN devices AS d ON d.id = w.device_id
JOIN variants AS v ON v.id = w.variant_id
JOIN toolchains AS t ON t.id = v.toolchain_id;
