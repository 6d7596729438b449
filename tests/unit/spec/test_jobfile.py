"""Job files: every refusal names the file, the job and the key."""

import pytest

from shardcron.spec.jobfile import JobFileError, load_job_file

TOML_CASES = [
    (
        '[[jobs]]\nid = "t"\nevery = "1s"\ntimzone = "Asia/Tokyo"\nexecutor = { kind = "noop" }\n',
        "job 't': timzone: unknown key; did you mean 'timezone'?",
    ),
    (
        '[[jobs]]\nid = "r"\nevery = "1s"\nretyr = { max_attempts = 3 }\nexecutor = { kind = "noop" }\n',
        "job 'r': retyr: unknown key; did you mean 'retry'?",
    ),
    (
        '[[jobs]]\nid = "b"\nevery = "1s"\nbogus_field = 1\nexecutor = { kind = "noop" }\n',
        "job 'b': bogus_field: unknown key; expected one of:",
    ),
    (
        '[[jobs]]\nid = "e"\nevery = "1s"\nexecutor = { kind = "http", url = "http://x", hedaers = {} }\n',
        "job 'e': executor.hedaers: unknown key of the http executor; did you mean 'headers'?",
    ),
    (
        '[[jobs]]\nid = "s"\nschedule = { cron = "* * * * *", timzone = "UTC" }\nexecutor = { kind = "noop" }\n',
        "job 's': schedule.timzone: unknown key; did you mean 'timezone'?",
    ),
    (
        '[[jobs]]\nid = "q"\nevery = "1s"\nretry = { max_atempts = 2 }\nexecutor = { kind = "noop" }\n',
        "job 'q': retry.max_atempts: unknown key; did you mean 'max_attempts'?",
    ),
    ('[[jobs]]\nid = "n"\nevery = "1s"\n', "job 'n': executor: missing"),
    ('[[jobs]]\nevery = "1s"\nexecutor = { kind = "noop" }\n\n[[jobs]]\nevery = "1s"\n', "jobs[0]: id:"),
    ('[[job]]\nid = "x"\n', "expected a top-level 'jobs' list or table (found 'job': did you mean 'jobs'?)"),
    ('jbos = 1\n[[jobs]]\nid = "x"\nevery = "1s"\nexecutor = { kind = "noop" }\n', "'jbos': unknown top-level key"),
]


@pytest.mark.parametrize("text, message", TOML_CASES, ids=[m[:40] for _, m in TOML_CASES])
def test_a_bad_toml_file_names_the_file_the_job_and_the_key(tmp_path, text, message):
    path = tmp_path / "jobs.toml"
    path.write_text(text)
    with pytest.raises(JobFileError) as err:
        load_job_file(str(path))
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_yaml_jobs_keyed_by_id_are_checked_the_same(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text("jobs:\n  tokyo:\n    every: 1m\n    timzone: Asia/Tokyo\n    executor: {kind: noop}\n")
    with pytest.raises(JobFileError, match=r"jobs.yaml: job 'tokyo': timzone: unknown key; did you mean 'timezone'"):
        load_job_file(str(path))


def test_a_good_file_loads(tmp_path):
    path = tmp_path / "jobs.toml"
    path.write_text(
        '[[jobs]]\nid = "a"\nevery = "1s"\ntimezone = "Asia/Tokyo"\nexecutor = { kind = "noop" }\n'
        '[[jobs]]\nid = "b"\nschedule = { cron = "0 9 * * *", timezone = "Europe/Lisbon" }\n'
        'retry = { max_attempts = 2 }\nexecutor = { kind = "http", url = "http://x" }\n'
    )
    a, b = load_job_file(str(path))
    assert (a.id, a.schedule.timezone, b.id, b.schedule.timezone, b.retry.max_attempts) == (
        "a",
        "Asia/Tokyo",
        "b",
        "Europe/Lisbon",
        2,
    )


# -- malformed files: each class refused with a clear error, never a traceback -------------------

NOOP_JOB = '[[jobs]]\nid = "t"\nevery = "1s"\nexecutor = { kind = "noop" }\n'
LAUGHS = "".join(f"  - &l{i} [" + ", ".join([f"*l{i - 1}" if i else '"lol"'] * 9) + "]\n" for i in range(9))

MALFORMED = [
    ("latin.toml", NOOP_JOB.replace('"t"', '"caf\xe9"').encode("latin-1"), "not UTF-8: byte 0xe9 at offset 18"),
    ("deep.json", b'{"jobs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper than the limit of 64"),
    ("deep.yaml", b"jobs: " + b"[" * 100_000 + b"]" * 100_000, "nested deeper than the limit of 64"),
    ("deep.toml", b"jobs = " + b"[" * 100_000 + b"]" * 100_000, "nested deeper than the limit of 64"),
    (
        "laughs.yaml",
        (
            "jobs:\n  x:\n    every: 1s\n    executor:\n      kind: celery\n      url: redis://h\n"
            "      task: t\n      args:\n" + LAUGHS.replace("  - ", "        - ")
        ).encode(),
        "anchors and aliases",
    ),
    ("alias.yaml", b"base: &b {kind: noop}\njobs:\n  x: {every: 1s, executor: *b}\n", "anchors and aliases"),
    ("bigint.yaml", b"jobs:\n  x:\n    at_ms: 100000000000000000000000\n    executor: {kind: noop}\n", "outside 1970"),
    (
        "bigint2.yaml",
        b"jobs:\n  x:\n    every: 1s\n    history_limit: 100000000000000000000000\n    executor: {kind: noop}\n",
        "at most 1000000",
    ),
    ("longid.toml", NOOP_JOB.replace('"t"', '"' + "x" * 10_000_000 + '"').encode(), "characters long"),
]


@pytest.mark.parametrize("name, raw, says", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_is_refused_quickly_with_a_clear_error(tmp_path, name, raw, says):
    path = tmp_path / name
    path.write_bytes(raw)
    with pytest.raises(JobFileError) as err:
        load_job_file(str(path))
    assert str(err.value).startswith(f"{path}: ") and says in str(err.value), str(err.value)[:300]
    assert len(str(err.value)) < 600  # the 10 MB id is not echoed whole


def test_a_file_is_read_no_further_than_the_limit(monkeypatch):
    from shardcron.spec import jobfile

    monkeypatch.setattr(jobfile, "MAX_FILE_BYTES", 1024)
    with pytest.raises(JobFileError) as err:
        load_job_file("/dev/zero")  # endless: only a bounded read ends
    assert "larger than the limit" in str(err.value)
