-- The CPU emulator as a device, compiler and code-object format
-- (flytune search --emulate): devices.runtime 'emu', toolchains.backend
-- 'emulate' (the host C++ compiler) and code_objects.format 'so' (its shared
-- libraries). SQLite cannot alter a CHECK, so each table is rebuilt (the
-- runner turns foreign-key enforcement off around a migration and checks
-- every key before it commits). The view winner_details reads two of them and
-- is recreated unchanged.
DROP VIEW winner_details;

CREATE TABLE devices_v2 (
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
INSERT INTO devices_v2 SELECT * FROM devices;
DROP TABLE devices;
ALTER TABLE devices_v2 RENAME TO devices;

CREATE TABLE toolchains_v2 (
  id      INTEGER PRIMARY KEY,
  backend TEXT NOT NULL CHECK (backend IN ('comgr', 'clang', 'nvrtc', 'emulate')),
  version TEXT NOT NULL,
  path    TEXT NOT NULL,
  UNIQUE (backend, version, path)
) STRICT;
INSERT INTO toolchains_v2 SELECT * FROM toolchains;
DROP TABLE toolchains;
ALTER TABLE toolchains_v2 RENAME TO toolchains;

CREATE TABLE code_objects_v2 (
  hash   TEXT PRIMARY KEY,
  format TEXT NOT NULL CHECK (format IN ('hsaco', 'cubin', 'so')),
  size   INTEGER NOT NULL,
  bytes  BLOB NOT NULL
) STRICT;
INSERT INTO code_objects_v2 SELECT * FROM code_objects;
DROP TABLE code_objects;
ALTER TABLE code_objects_v2 RENAME TO code_objects;

-- Winners with names instead of ids, for reading in sqlite3.
CREATE VIEW winner_details AS
SELECT p.key AS problem, d.name AS device, d.arch AS arch, w.tokens, w.kind, v.kernel_name, w.median_us, w.p10_us,
       w.p90_us, w.speedup_vs_default, t.backend || ' ' || t.version AS toolchain, w.run_id, w.chosen_at
FROM winners AS w
JOIN problems AS p ON p.id = w.problem_id
JOIN devices AS d ON d.id = w.device_id
JOIN variants AS v ON v.id = w.variant_id
JOIN toolchains AS t ON t.id = v.toolchain_id;
