# Runs inside every sandbox container, around the agent (passed to `sh -c`; "$@" is the agent's
# argv). Everything here happens in the container: the host never runs git in the workspace.
#
#   FKS_MODE    run (prepare, run the agent, export) or export (export only)
#   FKS_BRANCH  the step's branch; FKS_START the commit it starts at when not checked out yet
#   FKS_SINCE   the branch tip the host already has: the bundle holds only what is newer
#   FKS_BEFORE  the previous iteration's snapshot, if any (saves a scan of the tree)
#   FKS_TASK_YAML, FKS_REVIEW_YAML  for `fks forge`'s Implement stage: written to .forge/task.yaml
#               and .forge/review.yaml (kept out of git)
#
# The workspace is a Docker volume at /workspace: a git repository whose object store borrows
# the user's objects (read-only at /fks/objects) as an alternate. What leaves it is data in
# .git/fks-export/: `bundle` (the branch and, if files were left uncommitted, a commit of them
# as refs/fks/leftover) and `info` (key=value lines). The host checks both and trusts neither.
set -u
ex=.git/fks-export
say() { printf '%s\n' "$*" >>"$ex/info"; }

prepare() {
    if [ ! -d .git ]; then
        git init -q . || return 1
        echo /fks/objects >.git/objects/info/alternates
        git config gc.auto 0
        git config maintenance.auto false
        git config core.logAllRefUpdates false
    fi
    if [ "$(git symbolic-ref -q HEAD)" != "refs/heads/$FKS_BRANCH" ]; then
        # A new step. When the last export found the tree exactly at its commit, only the
        # files that differ are touched (read-tree); otherwise every file is checked.
        if [ -f .git/fks-clean ] && git read-tree -m -u HEAD "$FKS_START" 2>/dev/null; then
            git update-ref "refs/heads/$FKS_BRANCH" "$FKS_START" &&
                git symbolic-ref HEAD "refs/heads/$FKS_BRANCH" || return 1
        else
            git checkout -q -f --no-track -B "$FKS_BRANCH" "$FKS_START" || return 1
        fi
        git clean -q -ffdx
        # Exactly the commit now: no need to scan a tree just written (git would re-read
        # every file whose time equals the index's).
        FKS_BEFORE="$(git rev-parse HEAD) $(git rev-parse "HEAD^{tree}")"
    fi
}

# The commit tip and the tree of every file as it is now (tracked and untracked, ignores
# respected), without touching the agent's index: the progress fingerprint, and what an
# uncommitted-leftovers commit would hold.
snapshot() {
    cp .git/index .git/fks-index 2>/dev/null || rm -f .git/fks-index
    tree=$(GIT_INDEX_FILE=.git/fks-index sh -c 'git add -A . && git write-tree' 2>/dev/null)
    rm -f .git/fks-index
    printf '%s %s' "$(git rev-parse -q --verify HEAD 2>/dev/null)" "$tree"
}

export_work() {
    tip=$(git rev-parse -q --verify "refs/heads/$FKS_BRANCH^{commit}" 2>/dev/null)
    if [ -z "$tip" ]; then
        say "warning=the agent deleted its branch $FKS_BRANCH; it stays where it was"
        tip=$FKS_SINCE
    fi
    head=$(git symbolic-ref -q HEAD)
    if [ "$head" != "refs/heads/$FKS_BRANCH" ]; then
        detached=$(git rev-parse -q --verify "HEAD^{commit}" 2>/dev/null)
        if [ -z "$head" ] && [ -n "$detached" ] && git merge-base --is-ancestor "$tip" "$detached"; then
            tip=$detached  # commits made on a detached HEAD still count
        fi
        say "warning=the agent left HEAD off its branch; put it back on $FKS_BRANCH"
        git update-ref "refs/heads/$FKS_BRANCH" "$tip"
        git symbolic-ref HEAD "refs/heads/$FKS_BRANCH"
    fi
    refs=
    [ "$tip" = "$FKS_SINCE" ] || refs="refs/heads/$FKS_BRANCH"
    now=$(snapshot)
    tree=${now#* }
    rm -f .git/fks-clean
    if [ "$tree" = "$(git rev-parse -q --verify "$tip^{tree}")" ]; then
        : >.git/fks-clean  # nothing uncommitted: the next step may switch by read-tree
    elif [ -n "$tree" ]; then
        leftover=$(echo "fks: uncommitted work" | git commit-tree "$tree" -p "$tip") &&
            git update-ref refs/fks/leftover "$leftover" && refs="$refs refs/fks/leftover"
    fi
    if [ -n "$refs" ]; then
        # shellcheck disable=SC2086
        git bundle create -q "$ex/bundle" $refs "^$FKS_SINCE" || say "error=git bundle create failed"
    fi
    say "after=$now"
}

cd /workspace || exit 125
mkdir -p "$HOME" "${CLAUDE_CONFIG_DIR:-$HOME/.claude}" 2>/dev/null
if [ "$FKS_MODE" = export ]; then
    rm -rf "$ex" && mkdir -p "$ex" || exit 125
    export_work
    say "end=1"
    exit 0
fi
if ! prepare; then
    echo "fks: could not prepare the workspace (branch $FKS_BRANCH at $FKS_START)" >&2
    exit 125
fi
rm -rf "$ex" && mkdir -p "$ex" || exit 125
if [ -n "${FKS_TASK_YAML:-}" ]; then
    grep -qx '/.forge/' .git/info/exclude 2>/dev/null || echo '/.forge/' >>.git/info/exclude
    mkdir -p .forge && printf '%s\n' "$FKS_TASK_YAML" >.forge/task.yaml || exit 125
    rm -f .forge/review.yaml
    if [ -n "${FKS_REVIEW_YAML:-}" ]; then
        printf '%s\n' "$FKS_REVIEW_YAML" >.forge/review.yaml || exit 125
    fi
fi
if ! command -v "$1" >/dev/null 2>&1; then
    say "missing=1"
    echo "fks: agent '$1' not found in the image" >&2
    exit 127
fi
# The previous iteration's "after" (the workspace has not changed since), else a scan.
before=${FKS_BEFORE:-$(snapshot)}
# Signals from the engine reach the agent directly (tini signals the whole process group);
# this shell only outlives the agent to export its work.
trap ':' INT TERM
"$@"
code=$?
trap - INT TERM
rm -rf "$ex" && mkdir -p "$ex" || exit 125
say "before=$before"
export_work
say "end=1"
[ -f "$ex/bundle" ] && say "bundle=1"
# The same lines on stderr, after the agent's last output: when there is no bundle, the host
# needs nothing else from the container (fks takes this line out of the agent's output).
printf 'fks-export %s %s\n' "${FKS_NONCE:-}" "$(tr '\n' '\t' <"$ex/info")" >&2
exit "$code"
