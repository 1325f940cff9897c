CREATE INDEX measurements_by_key ON measurements (variant_id, problem_id, device_id, tokens);
CREATE INDEX measurements_by_problem ON measurements (problem_id, device_id, tokens);
CREATE INDEX measurements_by_run ON measurements (run_id, status);
CREATE INDEX variants_by_target ON variants (target, kind, compile_status);
CREATE TABLE "code_objects" (
  hash   TEXT PRIMARY KEY,
  format TEXT NOT NULL CHECK (format IN ('hsaco', 'cubin', 'so')),
  size   INTEGER NOT NULL,
  bytes  BLOB NOT NULL
) STRICT;
CREATE TABLE "devices" (
  id              INTEGER PRIMARY KEY,
  runtime         TEXT NOT NULL CHECK (runtime IN ('cuda', 'hip', 'emu', 'none')),
  name            TEXT NOT NULL,
  arch            TEXT NOT NULL,
  compute_units   INTEGER NOT NULL DEFAULT 0,
  memory_bytes    INTEGER NOT NULL DEFAULT 0,
  l2_bytes        INTEGER NOT NULL DEFAULT 0,
  max_shared_per_block INTEGER NOT NULL DEFAULT 0,
  clock_mhz       INTEGER NOT NULL DEFAULT 0,
  driver_version  TEXT NOT NULL DEFAULT '',
  runtime_version TEXT NOT NULL DEFAULT '',
  UNIQUE (runtime, name, arch, compute_units, memory_bytes, l2_bytes, max_shared_per_block, clock_mhz,
          driver_version, runtime_version)
) STRICT;
CREATE TABLE measurements (
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs (id),
  variant_id    INTEGER NOT NULL REFERENCES variants (id),
  problem_id    INTEGER NOT NULL REFERENCES problems (id),
  device_id     INTEGER NOT NULL REFERENCES devices (id),
  tokens        INTEGER NOT NULL CHECK (tokens > 0),
  phase         TEXT NOT NULL DEFAULT '',
  status        TEXT NOT NULL
                CHECK (status IN ('ok', 'compile_error', 'verify_failed', 'launch_error', 'timeout', 'skipped')),
  error_message TEXT NOT NULL DEFAULT '',
  median_us     REAL,
  p10_us        REAL,
  p90_us        REAL,
  min_us        REAL,
  samples       INTEGER NOT NULL DEFAULT 0,
  rel_l2_err    REAL,
  max_abs_err   REAL,
  sm_clock_mhz  INTEGER,
  mem_clock_mhz INTEGER,
  temperature_c REAL,
  pci_bus_id    TEXT NOT NULL DEFAULT '',
  measured_at   TEXT NOT NULL
) STRICT;
CREATE TABLE problems (
  id         INTEGER PRIMARY KEY,
  key        TEXT NOT NULL UNIQUE,
  experts    INTEGER NOT NULL CHECK (experts > 0),
  hidden     INTEGER NOT NULL CHECK (hidden > 0),
  inter      INTEGER NOT NULL CHECK (inter > 0),
  topk       INTEGER NOT NULL CHECK (topk > 0),
  dtype      TEXT NOT NULL,
  activation TEXT NOT NULL,
  routing    TEXT NOT NULL
) STRICT;
CREATE TABLE runs (
  id               INTEGER PRIMARY KEY,
  started_at       TEXT NOT NULL,
  ended_at         TEXT,
  status           TEXT NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'finished', 'interrupted', 'failed')),
  command_line     TEXT NOT NULL,
  flytune_version  TEXT NOT NULL,
  git_commit       TEXT NOT NULL,
  templates_commit TEXT NOT NULL,
  hostname         TEXT NOT NULL,
  strategy         TEXT NOT NULL,
  options_json     TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(options_json))
) STRICT;
CREATE TABLE schema_migrations (
  version    INTEGER PRIMARY KEY,
  name       TEXT NOT NULL,
  applied_at TEXT NOT NULL
) STRICT;
CREATE TABLE "toolchains" (
  id      INTEGER PRIMARY KEY,
  backend TEXT NOT NULL CHECK (backend IN ('comgr', 'clang', 'nvrtc', 'emulate')),
  version TEXT NOT NULL,
  path    TEXT NOT NULL,
  UNIQUE (backend, version, path)
) STRICT;
CREATE TABLE variants (
  id               INTEGER PRIMARY KEY,
  kernel_name      TEXT NOT NULL,
  target           TEXT NOT NULL,
  kind             TEXT NOT NULL,
  params_json      TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(params_json)),
  source_hash      TEXT NOT NULL,
  code_object_hash TEXT,
  toolchain_id     INTEGER NOT NULL REFERENCES toolchains (id),
  compile_status   TEXT NOT NULL CHECK (compile_status IN ('ok', 'compile_error')),
  compile_log      TEXT NOT NULL DEFAULT '',
  compile_seconds  REAL,
  vgprs            INTEGER,
  agprs            INTEGER,
  sgprs            INTEGER,
  regs             INTEGER,
  lds_bytes        INTEGER,
  scratch_bytes    INTEGER,
  spills           INTEGER,
  occupancy        INTEGER,
  matrix_ops_json  TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(matrix_ops_json)),
  created_at       TEXT NOT NULL,
  updated_at       TEXT NOT NULL,
  UNIQUE (kernel_name, target, toolchain_id)
) STRICT;
CREATE TABLE "winners" (
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
CREATE VIEW latest_measurements AS
SELECT m.*
FROM measurements AS m
JOIN (SELECT max(id) AS id FROM measurements GROUP BY variant_id, problem_id, device_id, tokens) AS latest
  ON latest.id = m.id;
CREATE VIEW winner_details AS
SELECT p.key AS problem, d.name AS device, d.arch AS arch, w.pass, w.tokens, w.kind, v.kernel_name, w.median_us,
       w.p10_us, w.p90_us, w.speedup_vs_default, t.backend || ' ' || t.version AS toolchain, w.run_id, w.chosen_at
FROM winners AS w
JOIN problems AS p ON p.id = w.problem_id
JOIN devices AS d ON d.id = w.device_id
JOIN variants AS v ON v.id = w.variant_id
JOIN toolchains AS t ON t.id = v.toolchain_id;
