"""gtest_summary.py RC RESULTS.json...: run_tests.sh's last line, "tests: N passed, N failed, N
skipped", from GoogleTest's JSON results (RC: the binary's exit code, said when a file is missing)."""
import json
import sys


def main(argv):
    tests = []
    for path in argv[2:]:
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print(f"tests: could not read results ({e}); exit code {argv[1]}")
            return
        tests += [t for s in d.get("testsuites", []) for t in s.get("testsuite", [])]
    skipped = sum(1 for t in tests if t.get("result") == "SKIPPED" or t.get("status") == "NOTRUN")
    failed = sum(1 for t in tests if "failures" in t)
    print(f"tests: {len(tests) - failed - skipped} passed, {failed} failed, {skipped} skipped")


if __name__ == "__main__":
    main(sys.argv)
