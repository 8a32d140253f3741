#!/bin/sh
# One task per line of PLAN.md ("file: content"); each task depends on the one before.
set -e
previous=""
while IFS= read -r line; do
    file=${line%%:*}
    if forge-tasks list --plain | grep -q "Write $file"; then
        previous=$(forge-tasks list --json | python3 -c "import json,sys; print(next(t['id'] for t in json.load(sys.stdin) if t['title']=='Write $file'))")
        continue
    fi
    set -- "Write $file" --description "$line" --ac "$file exists with the planned content"
    [ -n "$previous" ] && set -- "$@" --depends-on "$previous"
    previous=$(forge-tasks create "$@" | awk '{print $2}')
    echo "planned $previous: Write $file"
done < PLAN.md
git add forge/tasks && git commit -qm "plan: tasks from PLAN.md" || true
echo FORKHESTRA_COMPLETE
