#!/usr/bin/python3
"""validate_report.py SCHEMA REPORT: checks a prefill-bench JSON report against
lib/report_schema.json (JSON Schema draft 2020-12). Prints every error with the
JSON path where it occurred; exit 0 when valid, 1 on any error, 2 on bad usage
or unreadable files. Needs python3-jsonschema (Debian's /usr/bin/python3)."""
import json
import sys


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        print(f"{path}: cannot load JSON: {e}", file=sys.stderr)
        sys.exit(2)


def main():
    if len(sys.argv) != 3:
        print("usage: validate_report.py SCHEMA REPORT", file=sys.stderr)
        return 2
    try:
        import jsonschema
    except ImportError:
        print("validate_report.py: python module jsonschema missing "
              "(apt-get install python3-jsonschema)", file=sys.stderr)
        return 2
    schema_path, report_path = sys.argv[1], sys.argv[2]
    schema = load(schema_path)
    report = load(report_path)
    validator_class = jsonschema.Draft202012Validator
    try:
        validator_class.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        print(f"{schema_path}: not a valid draft 2020-12 schema: {e.message}", file=sys.stderr)
        return 1
    validator = validator_class(schema)
    errors = sorted(validator.iter_errors(report), key=lambda e: list(map(str, e.absolute_path)))
    for e in errors:
        # e.json_path is "$.runs[0].checks[1]..." (jsonschema >= 4.0).
        path = getattr(e, "json_path", None) or "$" + "".join(
            f"[{p}]" if isinstance(p, int) else f".{p}" for p in e.absolute_path)
        print(f"{report_path}: {path}: {e.message}", file=sys.stderr)
    if errors:
        print(f"{report_path}: {len(errors)} error(s) against {schema_path}", file=sys.stderr)
        return 1
    print(f"{report_path}: valid against {schema_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
