"""Job files: every refusal names the file, the job and the key."""

import pytest

from shardcron.jobfile import JobFileError, load_job_file

TOML_CASES = [
    ('[[jobs]]\nid = "t"\nevery = "1s"\ntimzone = "Asia/Tokyo"\nexecutor = { kind = "noop" }\n',
     "job 't': timzone: unknown key; did you mean 'timezone'?"),
    ('[[jobs]]\nid = "r"\nevery = "1s"\nretyr = { max_attempts = 3 }\nexecutor = { kind = "noop" }\n',
     "job 'r': retyr: unknown key; did you mean 'retry'?"),
    ('[[jobs]]\nid = "b"\nevery = "1s"\nbogus_field = 1\nexecutor = { kind = "noop" }\n',
     "job 'b': bogus_field: unknown key; expected one of:"),
    ('[[jobs]]\nid = "e"\nevery = "1s"\nexecutor = { kind = "http", url = "http://x", hedaers = {} }\n',
     "job 'e': executor.hedaers: unknown key of the http executor; did you mean 'headers'?"),
    ('[[jobs]]\nid = "s"\nschedule = { cron = "* * * * *", timzone = "UTC" }\nexecutor = { kind = "noop" }\n',
     "job 's': schedule.timzone: unknown key; did you mean 'timezone'?"),
    ('[[jobs]]\nid = "q"\nevery = "1s"\nretry = { max_atempts = 2 }\nexecutor = { kind = "noop" }\n',
     "job 'q': retry.max_atempts: unknown key; did you mean 'max_attempts'?"),
    ('[[jobs]]\nid = "n"\nevery = "1s"\n', "job 'n': executor: missing"),
    ('[[jobs]]\nevery = "1s"\nexecutor = { kind = "noop" }\n\n[[jobs]]\nevery = "1s"\n', "jobs[0]: id:"),
    ('[[job]]\nid = "x"\n', "expected a top-level 'jobs' list or table (found 'job': did you mean 'jobs'?)"),
    ('jbos = 1\n[[jobs]]\nid = "x"\nevery = "1s"\nexecutor = { kind = "noop" }\n',
     "'jbos': unknown top-level key"),
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
    path.write_text('[[jobs]]\nid = "a"\nevery = "1s"\ntimezone = "Asia/Tokyo"\nexecutor = { kind = "noop" }\n'
                    '[[jobs]]\nid = "b"\nschedule = { cron = "0 9 * * *", timezone = "Europe/Lisbon" }\n'
                    'retry = { max_attempts = 2 }\nexecutor = { kind = "http", url = "http://x" }\n')
    a, b = load_job_file(str(path))
    assert (a.id, a.schedule.timezone, b.id, b.schedule.timezone, b.retry.max_attempts) == \
        ("a", "Asia/Tokyo", "b", "Europe/Lisbon", 2)
