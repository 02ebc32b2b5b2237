# Checks a doctor --prometheus file the way Prometheus reads it: every line a comment or a
# sample of the text exposition format, each series once, each family's samples together,
# and the whole file accepted by the prometheus_client parser (Debian's
# python3-prometheus-client, an implementation that is not muster's). Prints the samples as
# JSON ([name, labels, value]) for the test to look into. Run with /usr/bin/python3.
import json
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

text = open(sys.argv[1]).read()
assert text.endswith("\n"), "the file does not end with a newline"
name = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
label = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
sample = re.compile(rf"^({name})(?:\{{(?:{label})(?:,{label})*\}})? (\S+)$")
comment = re.compile(rf"^# (?:HELP {name} .*|TYPE {name} (?:gauge|counter|untyped))$")
seen, finished, current = set(), set(), None
for number, line in enumerate(text.splitlines(), 1):
    if line.startswith("#"):
        assert comment.match(line), f"line {number} is not a valid comment: {line!r}"
        continue
    m = sample.match(line)
    assert m, f"line {number} is not a valid sample: {line!r}"
    float(m.group(2))
    series = line.rsplit(" ", 1)[0]
    assert series not in seen, f"line {number} repeats a series: {series}"
    seen.add(series)
    if m.group(1) != current:
        assert m.group(1) not in finished, f"line {number}: {m.group(1)}'s samples are not together"
        if current:
            finished.add(current)
        current = m.group(1)
samples = []
for family in text_string_to_metric_families(text):
    for s in family.samples:
        samples.append([s.name, s.labels, s.value])
assert len(samples) == len(seen), (len(samples), len(seen))
print(json.dumps(samples))
