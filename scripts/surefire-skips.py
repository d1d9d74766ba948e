"""Lists the tests Maven Surefire skipped (with their reasons) from its XML reports.

Used by scripts/test after the Java stage: tests of features still being built are skipped by
name until the broker advertises their APIs, and a skip must never be silent.
"""

import glob
import sys
import xml.etree.ElementTree as ET

for path in sorted(glob.glob(sys.argv[1] + "/TEST-*.xml")):
    for case in ET.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if skipped is not None:
            cls = case.get("classname").rsplit(".", 1)[-1]
            reason = skipped.get("message") or (skipped.text or "").strip().splitlines()[0:1]
            if isinstance(reason, list):
                reason = reason[0].split("Assumption failed: ", 1)[-1] if reason else ""
            print(f"skipped: {cls}.{case.get('name')}: {reason}")
