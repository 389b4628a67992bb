"""The job store's tables (see :mod:`tfdist.jobs.store`), one schema for SQLite and PostgreSQL.

The text is a template: ``{real}`` is an 8-byte float (SQLite's REAL; PostgreSQL's REAL is
4 bytes, which would round a time to ~2 minutes, so there it is DOUBLE PRECISION) and
``{serial}`` an auto-numbered primary key; each dialect fills them in
(:mod:`tfdist.jobs.store_sqlite`, :mod:`tfdist.jobs.store_postgres`). Everything else is
the SQL both speak. ``SCHEMA_VERSION`` is what a store records (SQLite's ``user_version``,
PostgreSQL's ``tfdist_schema`` table); a store made by an older tfdist is brought up to date
by the steps in :data:`MIGRATIONS` when it is opened.
"""

SCHEMA_VERSION = 7

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    state TEXT NOT NULL,
    backend TEXT,
    run_dir TEXT,
    detached INTEGER NOT NULL DEFAULT 0,
    supervisor_pid INTEGER,
    supervisor_start {real},
    submitted_at {real},
    started_at {real},
    ended_at {real},
    exit_code INTEGER,
    restarts_used INTEGER NOT NULL DEFAULT 0,
    max_restarts INTEGER,
    root_cause TEXT,
    metrics TEXT,
    stop_requested {real},
    tensorboard_url TEXT,
    username TEXT,
    goodput TEXT,
    phase TEXT,
    labels TEXT,
    data TEXT
);
CREATE INDEX IF NOT EXISTS jobs_run_dir ON jobs(run_dir);
{jobs_indexes}
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
    started_at {real},
    ended_at {real},
    progress TEXT,
    updated_at {real},
    resource_use TEXT,
    PRIMARY KEY (job_id, name)
);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    state TEXT,
    pid INTEGER,
    started_at {real},
    ended_at {real},
    exit_code INTEGER,
    reason TEXT,
    PRIMARY KEY (job_id, task, attempt)
);
CREATE TABLE IF NOT EXISTS transitions (
    id {serial},
    job_id TEXT NOT NULL,
    task TEXT,
    attempt INTEGER,
    state TEXT NOT NULL,
    time {real} NOT NULL,
    exit_code INTEGER,
    reason TEXT
);
CREATE INDEX IF NOT EXISTS transitions_job ON transitions(job_id);
CREATE TABLE IF NOT EXISTS progress (
    id {serial},
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    attempt INTEGER,
    time {real} NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS progress_job ON progress(job_id);
CREATE TABLE IF NOT EXISTS usage_samples (
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    seq INTEGER NOT NULL,
    attempt INTEGER,
    time {real} NOT NULL,
    cpu {real},
    rss BIGINT NOT NULL,
    mem_limit BIGINT,
    charged BIGINT,
    PRIMARY KEY (job_id, task, seq)
);
CREATE TABLE IF NOT EXISTS task_inputs (
    job_id TEXT NOT NULL,
    task TEXT NOT NULL,
    input TEXT NOT NULL,
    files INTEGER NOT NULL,
    bytes BIGINT,
    first TEXT,
    PRIMARY KEY (job_id, task, input)
);
"""

#: The dashboard's filters and its newest-first pages (10,000 jobs: a page is an index walk,
#: not a sort of every job); added to stores of version 1 by migration 2.
JOBS_INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_submitted ON jobs(submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_username ON jobs(username, submitted_at);
CREATE INDEX IF NOT EXISTS jobs_backend ON jobs(backend, submitted_at)
"""

#: Steps from version N-1 to N (then the whole schema is applied: its ``IF NOT EXISTS``
#: statements add what is new). 2: who submitted each job, and the dashboard's indexes.
#: 3: the goodput breakdown of each job. 4: the supervisor's phase of each job. 5: resource
#: use: each task's latest and peak (``tasks.resource_use``, JSON) and the ``usage_samples`` (the
#: table itself comes from the schema's ``IF NOT EXISTS``). 6: the job's own labels. 7: the
#: job's data (``jobs.data``: each input's totals, the outputs, their writer) and which files
#: each task got (the ``task_inputs`` table, from the schema: a count, bytes, the first few).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("ALTER TABLE jobs ADD COLUMN username TEXT",),
    3: ("ALTER TABLE jobs ADD COLUMN goodput TEXT",),  # supervisor/goodput.py's breakdown, JSON
    4: ("ALTER TABLE jobs ADD COLUMN phase TEXT",),  # states.PhaseState's value
    5: ("ALTER TABLE tasks ADD COLUMN resource_use TEXT",),  # node/usage.py's latest(), JSON
    # the job spec's labels as JSON with sorted keys and no spaces ({"a":"1","team":"x"}):
    # label text has no quote, so '"team":"x"' matches that label and no other (queries.py)
    6: ("ALTER TABLE jobs ADD COLUMN labels TEXT",),
    7: ("ALTER TABLE jobs ADD COLUMN data TEXT",),  # tfdist.data.plan.summary() less its tasks, JSON
}


def statements(real: str, serial: str) -> list[str]:
    """The schema's statements for a dialect's type names."""
    text = SCHEMA.format(real=real, serial=serial, jobs_indexes=JOBS_INDEXES.strip() + ";")
    return [s.strip() for s in text.split(";") if s.strip()]
