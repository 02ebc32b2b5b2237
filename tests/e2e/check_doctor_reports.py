# Validates a doctor --json report against share/doctor.schema.json and parses its --junit
# XML; prints "ok" and the JUnit counts, or why not. Run with Debian's /usr/bin/python3.
import json
import sys
import xml.etree.ElementTree as ET

import jsonschema

schema_path, json_path, junit_path = sys.argv[1:4]
report = json.load(open(json_path))
jsonschema.validate(report, json.load(open(schema_path)))
root = ET.parse(junit_path).getroot()
cases = root.findall("./testsuite/testcase")
failures = sum(1 for c in cases if c.find("failure") is not None)
skipped = sum(1 for c in cases if c.find("skipped") is not None)
assert len(cases) == len(report["checks"]), (len(cases), len(report["checks"]))
assert int(root.get("tests")) == len(cases)
assert failures == report["summary"]["fail"] == int(root.get("failures"))
assert skipped == report["summary"]["skip"] == int(root.get("skipped"))
names = [c.get("classname") + "/" + c.get("name") for c in cases]
print("ok", len(cases), failures, skipped)
for name in names:
    print(name)
