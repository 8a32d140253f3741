# Runs inside every sandbox container, around the agent (passed to `sh -c`; "$@" is the agent's
# argv). Everything here happens in the container: the host never runs git in the workspace.
#
#   FKS_MODE    run (prepare, run the agent, export) or export (export only)
#   FKS_BRANCH  the step's branch; FKS_START the commit it starts at when not checked out yet
#   FKS_SINCE   the branch tip the host already has: the bundle holds only what is newer
#   FKS_BEFORE  the previous iteration's snapshot, if any (saves a scan of the tree)
#   FKS_NEW_STEP  set for a step's first iteration: prepare even if HEAD is on FKS_BRANCH
#   FKS_START_TREE  FKS_START's tree; FKS_BASE_INDEX see prepare
#   FKS_TASK_YAML, FKS_REVIEW_YAML  for `fks forge`'s Implement stage: written to .forge/task.yaml
#               and .forge/review.yaml (kept out of git)
#   FKS_REVIEW_DIFF  for its Review stage: written to .forge/review.diff
#   FKS_WAIT_FOR  sockets to wait for before the agent starts (the egress proxy's, starting)
#   FKS_CLI_FILES  the agent CLI's settings files: their paths (fks's, in this container's
#               home, a tmpfs of its own); FKS_CLI_FILE_<n> the n-th one's text
#
# The workspace is a Docker volume at /workspace: a git repository whose object store borrows
# the user's objects (read-only at /fks/objects) as an alternate. What leaves it is data in
# .git/fks-export/: `bundle` (the branch and, if files were left uncommitted, a commit of them
# as refs/fks/leftover) and `info` (key=value lines). The host checks both and trusts neither.
set -u
ex=.git/fks-export info= head=
say() { printf '%s\n' "$*" >>"$ex/info" && info="$info$*	"; }

# HEAD's ref (refs/heads/…), read without a process: empty unless HEAD is a regular file
# saying `ref: …` (git's own writing of a symbolic HEAD).
head_ref() {
    head=
    [ -f .git/HEAD ] && [ ! -h .git/HEAD ] && read -r head <.git/HEAD 2>/dev/null
    case $head in "ref: "*) head=${head#ref: } ;; *) head= ;; esac
}

# An empty export directory. A real folder holding nothing but entries named info and bundle
# (what this script leaves there) is emptied with one `rm -f`, which follows no link; anything
# else is removed and made anew.
clear_export() {
    if [ -d "$ex" ] && [ ! -h "$ex" ]; then
        set --
        for f in "$ex"/* "$ex"/.[!.]* "$ex"/..?*; do
            case $f in
            "$ex/info" | "$ex/bundle") set -- "$@" "$f" ;;
            *) [ ! -e "$f" ] && [ ! -h "$f" ] || set -- "$ex" ;; # else a glob that matched nothing
            esac
        done
        if [ "${1:-}" != "$ex" ] && { [ $# -eq 0 ] || rm -f -- "$@" 2>/dev/null; }; then
            info=
            return 0
        fi
    fi
    rm -rf "$ex" && mkdir -p "$ex" && info=
}

# Folders the agent made read-only or unreadable, opened again (top down, each before it is
# read; from its parent, so that no path is too long): files can then be removed and written;
# their ctimes, which prepare relies on, do not change.
writable() { find . -type d ! -perm -u=rwx -execdir chmod u+rwx {} \; 2>/dev/null; true; }

# A new step gets a git dir of fks's making, never the last agent's: every byte of the volume,
# .git included (config, hooks, HEAD, refs, objects, index), may be hostile, and git obeys its
# config and reads its local objects unchecked. So .git is emptied and rebuilt here (HEAD,
# config, alternates: no hooks, no local objects), then `clean -ffdx` and `checkout -f -B`
# make the tree exactly the commit. Both trust an index's stat data to skip what is
# unchanged; the one they use is the base index (.git/fks-base-index): the index this function
# wrote at the volume's last checkout, before any agent ran (the agent gets a copy as
# .git/index). It is used only when its inode,
# ctime and size are what the host was told at that checkout (FKS_BASE_INDEX, from the
# `fks-prepared` line this script prints before the agent starts; see base_index); else the
# step starts from an empty index: every file removed and written, a full checkout. A file the
# agent changed since has a later ctime, which no one without CAP_SYS_TIME can set back, so
# git reads it again and writes it if it differs (a file written in the same second as the
# base index, git re-reads). The same holds for folders: one whose entries changed (made,
# removed, renamed) has a later ctime, so `clean` looks only in the folders changed since the
# base index (see changed_folders). A step that fails (folders the agent made read-only or
# unreadable) runs again once they are writable.

# Everything in .git goes, in one process, but the base index (a regular file: its identity
# is printed, as `%i:%C@:%s`). Nothing is followed. No folder is kept: its mode, default ACL
# or attributes would be the last agent's.
sweep_git() {
    find .git -mindepth 1 \( -path "$base" -type f -printf '%i:%C@:%s\n' \) -o -delete 2>/dev/null
}

# The folders whose entries changed since the base index was written (its ctime), as `./a/b`
# words; a changed folder's subfolders are not listed (clean takes it whole). At the base
# index's checkout every folder held only tracked entries, so an untracked or ignored one can
# be only in these. A folder not changed is read only if it has subfolders, known by its link
# count (2: none) where the file system keeps that count true (see links_count_folders);
# elsewhere every folder is read. "." (everything) when the top changed, when a changed
# folder's name has a character other than [A-Za-z0-9._/-], or when the walk fails.
changed_folders() {
    set --
    links_count_folders && set -- -o -type d -links 2 -prune
    find . -path ./.git -prune -o -type d \( -newercc "$base" \
        \( -path '*[!A-Za-z0-9._/-]*' -printf '. ' -quit -o -printf '%p ' \) -prune \) "$@"
}

# Whether the workspace's file system is one whose folders' link count is 2 plus their
# subfolders (some, such as CIFS, say 2 for every folder), read from the mount table.
links_count_folders() {
    fs=
    while read -r _ _ _ _ point rest; do
        [ "$point" = /workspace ] && fs=${rest#* - } && fs=${fs%% *}
    done </proc/self/mountinfo
    case $fs in ext2 | ext3 | ext4 | xfs | tmpfs) return 0 ;; *) return 1 ;; esac
}

unseen_by_git() {
    find "$@" -path ./.git -prune -o \( -name .git -o -type p -o -type s -o -type b -o -type c \) \
        -prune -exec rm -rf -- {} +
}

# Untracked and ignored entries in the given paths (`.`: everything), removed:
# - first what git's walk never looks at: FIFOs, sockets and devices (a FIFO git opened, such
#   as a `.gitattributes`, would block it) and any `.git` below the top (a nested repository's
#   config and hooks, or a gitfile);
# - then `git clean`, by the base index. git only warns of a folder it cannot open (and exits
#   0): anything on stderr is a failure, and the clean runs again once every folder is
#   writable;
# - what git still cannot clean (a path longer than it takes) goes whole, tracked files
#   included: the checkout writes them again.
clean() {
    { unseen_by_git "$@" 2>/dev/null || { writable && unseen_by_git "$@" 2>/dev/null; }; } && {
        out=$(GIT_INDEX_FILE=$base GIT_LITERAL_PATHSPECS=1 git clean -q -ffdx -- "$@" 2>&1) &&
            [ -z "$out" ] ||
            { writable && GIT_INDEX_FILE=$base GIT_LITERAL_PATHSPECS=1 git clean -q -ffdx -- "$@" 2>/dev/null; }
    } && return 0
    writable
    for path in "$@"; do
        if [ "$path" = . ]; then
            find . -mindepth 1 -maxdepth 1 ! -name .git -exec rm -rf -- {} + || return 1
        else
            rm -rf -- "$path" || return 1
        fi
    done
}

prepare() {
    # (a new step reads nothing the last agent wrote before .git is swept)
    [ -n "${FKS_NEW_STEP:-}" ] || head_ref
    if [ -z "${FKS_NEW_STEP:-}" ] && [ "$head" = "refs/heads/$FKS_BRANCH" ]; then
        prepared=kept full=  # a later iteration of the step: the workspace as the agent left it
        return 0
    fi
    base=.git/fks-base-index prepared=
    trusted= empty= full= changed=.
    if [ -n "${FKS_BASE_INDEX:-}" ] && [ -d .git ] && [ ! -h .git ]; then
        # Side by side: the sweep of .git and the look for changed folders (outside .git).
        sweep_git >/tmp/fks-base-ident &
        changed=$(changed_folders 2>/dev/null) || changed=.
        if ! wait "$!" || ! read -r ident </tmp/fks-base-ident; then
            ident=$(writable && sweep_git) || ident=
        fi
        # find's %C@ has a tenth digit
        [ "$ident" = "${FKS_BASE_INDEX%:*}0:${FKS_BASE_INDEX##*:}" ] && trusted=1
    fi
    if [ -z "$trusted" ]; then
        set -- * .[!.]* ..?*
        [ "$*" = "* .[!.]* ..?*" ] && [ ! -e "*" ] && empty=1
        rm -rf .git 2>/dev/null || { writable && rm -rf .git; } || return 1
        full=1
    fi
    mkdir -p .git/objects/info .git/refs "$ex" || return 1
    printf '[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = false\n\tcheckStat = default\n\ttrustctime = true\n[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n' >.git/config &&
        echo /fks/objects >.git/objects/info/alternates &&
        printf 'ref: refs/heads/%s\n' "$FKS_BRANCH" >.git/HEAD || return 1
    # Untracked and ignored files first (a new volume has none), so that nothing is in the way:
    # after a full switch everywhere, else in the folders changed since the base index.
    [ -n "$trusted" ] || changed=.
    [ -n "$empty" ] && changed=
    set -f
    # shellcheck disable=SC2086
    set -- $changed
    set +f
    [ $# -le 64 ] || set -- .
    [ $# -eq 0 ] || clean "$@" || return 1
    GIT_INDEX_FILE=$base git checkout -q -f --no-track -B "$FKS_BRANCH" "$FKS_START" 2>/dev/null ||
        { writable && GIT_INDEX_FILE=$base git checkout -q -f --no-track -B "$FKS_BRANCH" "$FKS_START"; } ||
        return 1
    # Exactly the commit now: no need to scan a tree just written (git would re-read every file
    # whose time equals the index's).
    FKS_BEFORE="$FKS_START ${FKS_START_TREE:-$(git rev-parse "$FKS_START^{tree}")}"
}

# After a full checkout nearly every file shares the base index's second, and git compares
# whole seconds: the next step would re-read every one of them (racily clean). For more than a
# few thousand files (a base index over 256 KiB) the agent waits instead: it starts only once
# the file clock has left that second, and the base index is dated then, so whatever the agent
# changes gets a later ctime, in whole seconds, than every file's recorded one. That wait is
# under a second whatever the tree; the re-read grows with it (20,000 files: ~0.25 s with a
# warm page cache, more without). Once per workspace volume: later steps write only the files
# that differ.
settle() {
    # shellcheck disable=SC2046
    set -- $(stat -c '%.9Y %s' "$base") || return 1
    [ "$2" -ge 262144 ] || return 0
    mtime=$1
    while :; do
        touch "$base" && now=$(stat -c %.9Y "$base") || return 1
        [ "${now%.*}" -gt "${mtime%.*}" ] && break
        ns=1${now#*.}
        sleep "$(printf '0.%09d' $((2000000000 - ns)))"
    done
}

# What the host may trust of the base index: its inode number, ctime and size. Neither its
# content nor its mtime can change without its ctime changing, except within the same tick of
# the file clock: so the agent starts only once that clock has moved past it (checked on the
# agent's copy, made since).
base_index() {
    cp "$base" .git/index || return 1  # the agent's (a hard link's count would change its ctime)
    while :; do
        # shellcheck disable=SC2046
        set -- $(stat -c '%i:%.9Z:%s' "$base" .git/index) || return 1
        made=${1#*:} since=${2#*:}
        made=${made%:*} since=${since%:*}
        if [ "${since%.*}" -gt "${made%.*}" ] ||
            { [ "${since%.*}" -eq "${made%.*}" ] && [ "1${since#*.}" -gt "1${made#*.}" ]; }; then
            prepared=$1
            return 0
        fi
        touch .git/index || return 1
    done
}

# The agent's index, split (once it is next written): each `git add` or `git commit` then
# writes only the entries changed since, not the whole index again (on 38,400 files: 3.4 MB,
# about half of a one-file commit's time). The base index, written with the config fks writes
# at a step's start, stays whole.
split_index() {
    printf '[core]\n\tsplitIndex = true\n' >>.git/config
}

# Shared indexes the agent's index no longer uses, removed: git writes a new one (the whole
# index's size) whenever a fifth of the entries are new, and deletes old ones only after two
# weeks. Free when there is one (a glob).
drop_shared() {
    set -- .git/sharedindex.*
    [ $# -gt 1 ] || return 0
    own=$(git rev-parse --shared-index-path 2>/dev/null) || return 0
    for f in "$@"; do [ "${f##*/}" = "${own##*/}" ] || rm -f -- "$f" 2>/dev/null; done
    return 0
}

# The commit tip and the tree of every file as it is now (tracked and untracked, ignores
# respected), without touching the agent's index: the progress fingerprint, and what an
# uncommitted-leftovers commit would hold.
snapshot() {
    printf '%s %s' "$(git rev-parse -q --verify HEAD 2>/dev/null)" "$(worktree_tree)"
}

# The copy keeps the index's time: git compares whole seconds, and tells a file changed in the
# second its stat was recorded only by that time (racily clean); a later one would hide it.
# A copy of a split index shares the agent's shared index, and a copy of a whole one (never
# written since the step began, say under a lock a killed git left) stays whole: neither
# writes a shared index of its own (which would stay behind it, the whole index's size, once
# per call). git names the shared index of a whole index with zeros.
worktree_tree() {
    cp -p .git/index .git/fks-index 2>/dev/null || rm -f .git/fks-index
    key=core.splitIndex value=false
    case $(GIT_INDEX_FILE=.git/fks-index git rev-parse --shared-index-path 2>/dev/null) in
    *sharedindex.*[!0]*) key=splitIndex.maxPercentChange value=100 ;;
    esac
    # shellcheck disable=SC2030
    (GIT_INDEX_FILE=.git/fks-index GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=$key \
        GIT_CONFIG_VALUE_0=$value && export GIT_INDEX_FILE GIT_CONFIG_COUNT GIT_CONFIG_KEY_0 \
        GIT_CONFIG_VALUE_0 && git add -A . && git write-tree) 2>/dev/null
    rm -f .git/fks-index
}

# Whether the agent left nothing uncommitted (HEAD's tree is then every file's): git's status,
# with the untracked cache kept in the agent's index, reads only the folders changed since its
# last look, and writes nothing unless something changed; a tree of everything written from a
# copy of the index (worktree_tree) also copies and rewrites the whole index (on 38,400 files,
# 3.4 MB: about twice the time). The agent's index can hide its own work from both alike; the
# host trusts neither.
left_nothing() {
    out=$(git -c core.untrackedCache=true status --porcelain --untracked-files=normal 2>/dev/null) &&
        [ -z "$out" ]
}

export_work() {
    tip= tip_tree=
    # The branch's commit and tree, in one process.
    # shellcheck disable=SC2046
    set -- $(git cat-file --batch-check='%(objectname)' 2>/dev/null <<EOF
refs/heads/$FKS_BRANCH^{commit}
refs/heads/$FKS_BRANCH^{tree}
EOF
    )
    [ $# -eq 2 ] && tip=$1 tip_tree=$2
    if [ -z "$tip" ]; then
        say "warning=the agent deleted its branch $FKS_BRANCH; it stays where it was"
        tip=$FKS_SINCE
    fi
    head_ref
    if [ "$head" != "refs/heads/$FKS_BRANCH" ]; then
        detached=$(git rev-parse -q --verify "HEAD^{commit}" 2>/dev/null)
        if [ -z "$head" ] && [ -n "$detached" ] && git merge-base --is-ancestor "$tip" "$detached"; then
            tip=$detached tip_tree= # commits made on a detached HEAD still count
        fi
        say "warning=the agent left HEAD off its branch; put it back on $FKS_BRANCH"
        git update-ref "refs/heads/$FKS_BRANCH" "$tip"
        git symbolic-ref HEAD "refs/heads/$FKS_BRANCH"
    fi
    refs=
    [ "$tip" = "$FKS_SINCE" ] || refs="refs/heads/$FKS_BRANCH"
    if left_nothing; then
        [ -n "$tip_tree" ] || tip_tree=$(git rev-parse -q --verify "$tip^{tree}")
        tree=$tip_tree
    else
        tree=$(worktree_tree)
    fi
    now="$tip $tree"
    [ -z "$tree" ] || [ -n "$tip_tree" ] || tip_tree=$(git rev-parse -q --verify "$tip^{tree}")
    if [ -n "$tree" ] && [ "$tree" != "$tip_tree" ]; then
        leftover=$(echo "fks: uncommitted work" | git commit-tree "$tree" -p "$tip") &&
            git update-ref refs/fks/leftover "$leftover" && refs="$refs refs/fks/leftover"
    fi
    if [ -n "$refs" ]; then
        # shellcheck disable=SC2086
        git bundle create -q "$ex/bundle" $refs "^$FKS_SINCE" || say "error=git bundle create failed"
    fi
    say "after=$now"
    drop_shared
}

# FKS_EXPORT_VIA=log: the bundle goes out on stderr too, for a host that cannot read this
# container's files (a swarm task on another node); log-small: only one of at most
# FKS_LOG_BUNDLE_BYTES (a local host reads a larger one, or one this image cannot print, from
# the stopped container). Base64 lines of 48 KiB of it each, then its sha256 (see
# logged_bundle.LoggedBundle).
log_bundle() {
    [ -f "$ex/bundle" ] || return 0
    case "${FKS_EXPORT_VIA:-}" in
    log) ;;
    log-small)
        case "${FKS_LOG_BUNDLE_BYTES:-}" in '' | *[!0-9]*) return 0 ;; esac
        command -v base64 >/dev/null && command -v sha256sum >/dev/null || return 0
        size=$(wc -c <"$ex/bundle") && [ "$((size))" -le "$FKS_LOG_BUNDLE_BYTES" ] || return 0
        sum=$(sha256sum <"$ex/bundle") || return 0
        ;;
    *) return 0 ;;
    esac
    base64 -w 65536 "$ex/bundle" | sed "s/^/fks-bundle ${FKS_NONCE:-} /" >&2
    [ -n "${sum:-}" ] || sum=$(sha256sum <"$ex/bundle") || return 0
    printf 'fks-bundle-end %s %s\n' "${FKS_NONCE:-}" "${sum%% *}" >&2
}

cd /workspace || exit 125
[ -d "$HOME" ] && [ -d "${CLAUDE_CONFIG_DIR:-$HOME/.claude}" ] ||
    mkdir -p "$HOME" "${CLAUDE_CONFIG_DIR:-$HOME/.claude}" 2>/dev/null
if [ "$FKS_MODE" = export ]; then
    clear_export || exit 125
    export_work
    say "end=1"
    if [ "${FKS_EXPORT_VIA:-}" = log ]; then
        [ -f "$ex/bundle" ] && say "bundle=1"
        log_bundle
        printf 'fks-export %s %s\n' "${FKS_NONCE:-}" "$info" >&2
    fi
    exit 0
fi
ready=
if prepare; then
    if [ -n "$full" ]; then settle && ready=1; else ready=1; fi
fi
# A new step's export directory is new; a later iteration's holds the last one's export, which
# must not pass for this one's if this script never gets to write it.
if [ "$prepared" = kept ]; then
    clear_export || ready=
elif [ -n "$ready" ]; then
    base_index && split_index || ready=
fi
if [ -z "$ready" ]; then
    echo "fks: could not prepare the workspace (branch $FKS_BRANCH at $FKS_START)" >&2
    exit 125
fi
# Before anything the agent could print: the host trusts only the first such line.
printf 'fks-prepared %s %s\n' "${FKS_NONCE:-}" "$prepared" >&2
if [ -n "${FKS_TASK_YAML:-}${FKS_REVIEW_DIFF:-}" ]; then
    mkdir -p .git/info || exit 125
    grep -qx '/.forge/' .git/info/exclude 2>/dev/null || echo '/.forge/' >>.git/info/exclude
    mkdir -p .forge && rm -f .forge/task.yaml .forge/review.yaml .forge/review.diff || exit 125
    if [ -n "${FKS_TASK_YAML:-}" ]; then
        printf '%s\n' "$FKS_TASK_YAML" >.forge/task.yaml || exit 125
    fi
    if [ -n "${FKS_REVIEW_YAML:-}" ]; then
        printf '%s\n' "$FKS_REVIEW_YAML" >.forge/review.yaml || exit 125
    fi
    if [ -n "${FKS_REVIEW_DIFF:-}" ]; then
        printf '%s\n' "$FKS_REVIEW_DIFF" >.forge/review.diff || exit 125
    fi
fi
n=0
for path in ${FKS_CLI_FILES:-}; do
    eval "text=\${FKS_CLI_FILE_$n}"
    mkdir -p "${path%/*}" && printf '%s' "$text" >"$path" || exit 125
    unset "FKS_CLI_FILE_$n"
    n=$((n + 1))
done
unset FKS_CLI_FILES text
# The egress proxy starts beside this container: the agent starts once its sockets are there
# (FKS_WAIT_FOR; the host stops this container if the proxy cannot start).
for path in ${FKS_WAIT_FOR:-}; do
    n=0
    until [ -S "$path" ]; do
        n=$((n + 1))
        [ $n -le 20000 ] || { echo "fks: the egress proxy did not start" >&2; exit 125; }
        sleep 0.02
    done
done
unset FKS_WAIT_FOR
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
exporting=$(date +%s%N 2>/dev/null)
clear_export || exit 125
say "before=$before"
export_work
say "code=$code"
say "end=1"
[ -f "$ex/bundle" ] && say "bundle=1"
log_bundle
exported=$(date +%s%N 2>/dev/null)
case "$exporting.$exported" in
*[!0-9.]* | .* | *.) ;; # a date without nanoseconds: not said
*) say "export_ms=$(((exported - exporting) / 1000000))" ;;
esac
# The same lines on stderr, after the agent's last output: when there is no bundle, the host
# needs nothing else from the container (fks takes this line out of the agent's output).
printf 'fks-export %s %s\n' "${FKS_NONCE:-}" "$info" >&2
exit "$code"
