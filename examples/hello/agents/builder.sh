#!/bin/sh
# Implement the first ready task, or say the step is complete when none is left.
set -e
task=$(forge-tasks list --ready --json | python3 -c "import json,sys; t=json.load(sys.stdin); print(t[0]['id'] if t else '')")
if [ -z "$task" ]; then
    echo "no ready tasks left"
    echo FORKHESTRA_COMPLETE
    exit 0
fi
line=$(forge-tasks view "$task" --json | python3 -c "import json,sys; print(json.load(sys.stdin)['description'])")
file=${line%%:*}
content=${line#*: }
forge-tasks edit "$task" --status "In Progress" >/dev/null
echo "$content" > "$file"
forge-tasks edit "$task" --check-ac 1 --status Done >/dev/null
git add -A && git commit -qm "$task: write $file"
echo "built $task ($file)"
