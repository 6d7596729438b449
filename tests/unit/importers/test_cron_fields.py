import pytest

from shardcron.importers.cron_fields import UnsupportedSchedule, translate_schedule

TRANSLATED = [
    # (source, dialect, shardcron's cron, a note holds)
    ("*/15 * * * *", "vixie", "*/15 * * * *", None),
    ("0 2 * * mon-fri", "vixie", "0 2 * * 1-5", None),
    ("15 3 * JAN,jul *", "vixie", "15 3 * 1,7 *", None),
    ("0 9-17/2 * * *", "vixie", "0 9-17/2 * * *", None),
    ("5 0 * * 7", "vixie", "5 0 * * 7", None),
    ("0 0 */1 * 1", "vixie", "0 0 * * 1", None),
    ("0 0 1,15 * 1", "vixie", "0 0 1,15 * 1", "OR day of week"),
    ("@yearly", "vixie", "0 0 1 1 *", None),
    ("@annually", "vixie", "0 0 1 1 *", None),
    ("@monthly", "vixie", "0 0 1 * *", None),
    ("@weekly", "vixie", "0 0 * * 0", None),
    ("@daily", "vixie", "0 0 * * *", None),
    ("@midnight", "vixie", "0 0 * * *", None),
    ("@hourly", "k8s", "0 * * * *", None),
    ("*/30 9-17 ? * mon-fri", "k8s", "*/30 9-17 * * 1-5", None),
    ("5/10 * * * *", "k8s", "5-59/10 * * * *", None),
    ("0 0 */2 * 1", "k8s", "0 0 */2 * 1", "OR day of week"),
]

REFUSED = [
    ("@reboot", "vixie", "@reboot runs once"),
    ("@every 5m", "k8s", "write shardcron.s every"),
    ("@fortnightly", "vixie", "not a cron macro"),
    ("*/0 * * * *", "vixie", "a step of '0' never"),
    ("*/" + "9" * 5000 + " * * * *", "vixie", "cut: 5000 characters"),
    ("0 " + "1" * 5000 + " * * *", "vixie", "outside 0-23"),
    ("61 * * * *", "vixie", "'61' is outside 0-59"),
    ("0 24 * * *", "vixie", "'24' is outside 0-23"),
    ("0 0 0 * *", "vixie", "'0' is outside 1-31"),
    ("0 0 * 13 *", "vixie", "'13' is outside 1-12"),
    ("0 0 * * 8", "vixie", "'8' is outside 0-7"),
    ("0 0 5-1 * *", "vixie", "runs backwards"),
    ("5/10 * * * *", "vixie", "write 5-59/10 or 5"),
    ("0 0 L * *", "vixie", "Quartz"),
    ("0 0 15W * *", "vixie", "Quartz"),
    ("0 0 * * 5#3", "vixie", "Quartz"),
    ("0 0 * * 5L", "vixie", "Quartz"),
    ("0 0 ? * *", "vixie", "is not a value"),
    ("0 0 * * funday", "vixie", "not a number or a name"),
    ("0 0 * jan-foo *", "vixie", "not a number or a name"),
    ("0 0 */2 * 1", "vixie", "only on days matching both"),
    ("0 0 1 * */2", "vixie", "only on days matching both"),
    ("0 0 * *", "vixie", "4 schedule fields"),
    ("0 0 * * * *", "vixie", "6 schedule fields"),
]


@pytest.mark.parametrize(("source", "dialect", "cron", "note"), TRANSLATED)
def test_translated(source, dialect, cron, note):
    got = translate_schedule(source, dialect)
    assert got.cron == cron
    assert (note is None and not got.notes) or any(note in n for n in got.notes)


@pytest.mark.parametrize(("source", "dialect", "reason"), REFUSED)
def test_refused_with_reason(source, dialect, reason):
    with pytest.raises(UnsupportedSchedule, match=reason.replace("?", r"\?")):
        translate_schedule(source, dialect)
