"""The job store's tables (see :mod:`tfdist.jobs.store`); ``SCHEMA_VERSION`` is its ``user_version``."""

SCHEMA_VERSION = 2

#: Columns added since version 1, as ``(table, column, type)``: a store made by an older
#: tfdist gets them when it is opened (each added only if missing, so opening it again with
#: the older tfdist, which sets its own version back, does no harm).
ADDED_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("jobs", "goodput", "TEXT"),  # the goodput breakdown (supervisor/goodput.py), JSON
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    backend TEXT,
    run_dir TEXT,
    detached INTEGER NOT NULL DEFAULT 0,
    supervisor_pid INTEGER,
    supervisor_start REAL,
    submitted_at REAL,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    restarts_used INTEGER NOT NULL DEFAULT 0,
    max_restarts INTEGER,
    root_cause TEXT,
    metrics TEXT,
    stop_requested REAL,
    tensorboard_url TEXT,
    goodput TEXT
);
CREATE INDEX IF NOT EXISTS jobs_run_dir ON jobs(run_dir);
CREATE TABLE IF NOT EXISTS tasks (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT,
    idx INTEGER,
    state TEXT,
    attempt INTEGER,
    restarts INTEGER,
    pid INTEGER,
    host TEXT,
    address TEXT,
    exit_code INTEGER,
    reason TEXT,
    started_at REAL,
    ended_at REAL,
    progress TEXT,
    updated_at REAL,
    PRIMARY KEY (job_id, name)
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT,
    pid INTEGER,
    started_at REAL,
    ended_at REAL,
    exit_code INTEGER,
    reason TEXT,
    PRIMARY KEY (job_id, task, attempt)
);
CREATE TABLE IF NOT EXISTS transitions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    task TEXT,
    attempt INTEGER,
    state TEXT NOT NULL,
    time REAL NOT NULL,
    exit_code INTEGER,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS progress (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER,
    time REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS progress_job ON progress(job_id);
"""
