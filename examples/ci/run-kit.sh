#!/bin/sh
# The tokcap conformance kit for any CI: replace my_pkg.sinks:MySink by your sink
# (module.path:ClassName), install your package and tokcap, and run this script from your
# project's folder. Arguments are passed on to pytest (-k PUT, --tokcap-fence=strict, ...).
#
# The exit code is pytest's: 0 when every claimed clause passed, 1 when one failed, 4 for a
# usage error. The reports (JSON, markdown, junit, timelines of failed concurrency checks) go
# to tokcap-reports/, and the markdown report is appended to the file $TOKCAP_SUMMARY names,
# or else to $GITHUB_STEP_SUMMARY, when one is set, whatever the run's outcome.
set -u
mkdir -p tokcap-reports
status=0
python -m pytest -p tokcap_pytest --tokcap-sink=my_pkg.sinks:MySink --tokcap-sink-kwargs='{"root": "{tmp_path}"}' --tokcap-report=tokcap-reports/report.json --tokcap-report-md=tokcap-reports/report.md --junitxml=tokcap-reports/junit.xml "$@" || status=$?
summary=${TOKCAP_SUMMARY:-${GITHUB_STEP_SUMMARY:-}}
if [ -n "$summary" ] && [ -f tokcap-reports/report.md ]; then
    cat tokcap-reports/report.md >> "$summary"
fi
exit "$status"
