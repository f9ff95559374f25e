# shellcheck shell=bash
# Shared code of ci/run-amd-test.sh, ci/run-cuda-test.sh and ci/isolated-run.sh; sourced, never run.
#
# The one rule of this file: no cache variable is named here. Every `--volume`/`--env` argument of
# the cache layout comes from `cacheroot env --format docker`, which renders the layout table of
# cacheroot.envs, so a variable added to that table reaches every container without an edit here.

# The checkout these scripts belong to: what the runners mount into the container by default.
CR_REPO=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)

# Print a message on stderr, prefixed with the running script's name, and exit (default status 2).
cr_die() {
    printf '%s: %s\n' "${0##*/}" "$1" >&2
    exit "${2:-2}"
}

cr_warn() {
    printf '%s: warning: %s\n' "${0##*/}" "$1" >&2
}

# The `cacheroot` command: $CACHEROOT_CLI when set, else the first one on PATH. Sets CR_CLI.
cr_find_cli() {
    if [[ -n "${CACHEROOT_CLI:-}" ]]; then
        CR_CLI=$CACHEROOT_CLI
        command -v -- "$CR_CLI" >/dev/null 2>&1 ||
            cr_die "CACHEROOT_CLI=$CR_CLI is not an executable command; point it at the cacheroot console script or unset it"
    elif CR_CLI=$(command -v cacheroot); then
        :
    else
        cr_die "the cacheroot command is not on PATH: run 'pip install .' (or 'uv pip install .') in the root of a cacheroot clone, or activate the virtual environment that has it, or set CACHEROOT_CLI to its path"
    fi
}

# The layout's container arguments for TAG (cuda, rocm or empty) with the volume mounted at
# CONTAINER_ROOT: one argument a line from the CLI, read into the array CR_LAYOUT.
# The host side of the volume is the CLI's own root (CACHEROOT, else its documented fallback); it
# is returned in CR_HOST_ROOT so the callers can create it (podman refuses a missing source).
cr_layout_args() {
    local tag=$1 container_root=$2 text line
    local -a cmd=("$CR_CLI" env --format docker --container-root "$container_root")
    [[ -n "$tag" ]] && cmd+=(--tag "$tag")
    # A command substitution, not `< <(...)`: a failing CLI (an invalid root) must stop the script.
    text=$("${cmd[@]}") || cr_die "'${cmd[*]}' failed (see its message above); fix the cache root and retry"
    mapfile -t CR_LAYOUT <<<"$text"
    CR_HOST_ROOT=
    for line in "${CR_LAYOUT[@]}"; do
        if [[ "$line" == --volume=*":$container_root" ]]; then
            line=${line#--volume=}
            CR_HOST_ROOT=${line%":$container_root"}
        fi
    done
    [[ -n "$CR_HOST_ROOT" ]] ||
        cr_die "'${cmd[*]}' printed no --volume=HOST:$container_root line; is that cacheroot up to date? ('pip install .' in the root of a current cacheroot clone updates it)"
}

# `--env=NAME` (the value stays out of the printed command) for each named variable that is set.
# Appends to the array CR_PASS.
cr_pass_env() {
    local name
    for name in "$@"; do
        [[ "$name" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || cr_die "PASS_ENV names '$name', which is not a variable name"
        if [[ -n "${!name+set}" ]]; then
            CR_PASS+=("--env=$name")
        fi
    done
}

# The hub cache (docs/hub.md), from HUB: `session` (the default) adds --cacheroot-hub to the
# session's pytest (PYTEST_ADDOPTS), so the tests' Hugging Face calls go through a hub cache whose
# store is on the volume; a URL (http://HOST:PORT) points HF_ENDPOINT at a running one (a sidecar,
# a cluster's); `off` does neither. Sets CR_HUB.
cr_hub_args() {
    CR_HUB=()
    local hub=${HUB:-session}
    case "$hub" in
        off) ;;
        session) CR_HUB=("--env=PYTEST_ADDOPTS=${PYTEST_ADDOPTS:+$PYTEST_ADDOPTS }--cacheroot-hub") ;;
        http://* | https://*) CR_HUB=("--env=HF_ENDPOINT=${hub%/}") ;;
        *) cr_die "HUB=$hub: expected session, off, or the URL of a running hub cache (http://HOST:PORT)" ;;
    esac
}

# Print ARGS as one shell-quoted line that a shell reads back as the same words.
cr_print_command() {
    local line
    printf -v line '%q ' "$@"
    printf '%s\n' "${line% }"
}

# The container runtime from CONTAINER_RUNTIME (docker or podman). Sets CR_RUNTIME.
cr_runtime() {
    CR_RUNTIME=${CONTAINER_RUNTIME:-docker}
    case "$CR_RUNTIME" in
        docker | podman) ;;
        *) cr_die "CONTAINER_RUNTIME=$CR_RUNTIME is not supported: expected docker or podman" ;;
    esac
}

# Run ARGS in the background and wait, so that INT/TERM/HUP reach the trap at once (bash defers
# traps while a foreground child runs): the trap removes the container by NAME, since a CI agent
# that cancels a job may kill the runtime's client before it stops the container.
# Sets CR_STATUS to the command's exit status.
cr_run_and_wait() {
    CR_CONTAINER_NAME=$1
    shift
    CR_CHILD=
    trap 'cr_cancel 130' INT
    trap 'cr_cancel 143' TERM
    trap 'cr_cancel 129' HUP
    "$@" &
    CR_CHILD=$!
    CR_STATUS=0
    wait "$CR_CHILD" || CR_STATUS=$?
    trap - INT TERM HUP
}

cr_cancel() {
    cr_warn "interrupted: removing container $CR_CONTAINER_NAME"
    "$CR_RUNTIME" rm -f "$CR_CONTAINER_NAME" >/dev/null 2>&1 || true
    if [[ -n "$CR_CHILD" ]]; then
        kill -TERM "$CR_CHILD" 2>/dev/null || true
        wait "$CR_CHILD" 2>/dev/null || true
    fi
    cr_tier_end
    exit "$1"
}

# The shared tier (CACHEROOT_SHARED set): the container mounts the merged view of this host's
# cache (L1) over the fleet's (L2) at CR_TIER_MERGED (CACHEROOT_MERGED, default "<L1>.merged"),
# made by `cacheroot tier up` (OverlayFS, else L1 seeded from L2). During the run a watchdog,
# `cacheroot tier sync --watch $TIER_SYNC_EVERY` (default 300 s), pushes complete new files to L2,
# so other hosts see new models early; after it, a final sync and `cacheroot tier down`.
cr_tier_wanted() {
    [[ -n "${CACHEROOT_SHARED:-}" ]]
}

# The commands around the run, one a line, for a dry run.
cr_tier_print() {
    local when=$1
    if [[ "$when" == before ]]; then
        cr_print_command "$CR_CLI" tier up --merged "$CR_TIER_MERGED"
        printf '%s &\n' "$(cr_print_command "$CR_CLI" tier sync --watch "${TIER_SYNC_EVERY:-300}")"
    else
        cr_print_command "$CR_CLI" tier sync
        cr_print_command "$CR_CLI" tier down --merged "$CR_TIER_MERGED"
    fi
}

cr_tier_begin() {
    "$CR_CLI" tier up --merged "$CR_TIER_MERGED" ||
        cr_die "'$CR_CLI tier up --merged $CR_TIER_MERGED' failed (see above); run 'cacheroot doctor' to check CACHEROOT_SHARED, or unset it to run on one tier"
    "$CR_CLI" tier sync --watch "${TIER_SYNC_EVERY:-300}" &
    CR_TIER_WATCHER=$!
}

# Stop the watchdog, push what the run left, take the merged view down. Never fails the job: the
# tests' status is what counts, and what was not pushed now is pushed by the next run's sync.
cr_tier_end() {
    [[ -n "${CR_TIER_WATCHER:-}" ]] || return 0
    kill -TERM "$CR_TIER_WATCHER" 2>/dev/null || true
    wait "$CR_TIER_WATCHER" 2>/dev/null || true
    CR_TIER_WATCHER=
    "$CR_CLI" tier sync || cr_warn "the final 'tier sync' failed; the next run's sync pushes what is left"
    "$CR_CLI" tier down --merged "$CR_TIER_MERGED" || cr_warn "'tier down --merged $CR_TIER_MERGED' failed"
}

# The shared body of the two test runners. TAG is cuda or rocm; the caller has filled the array
# CR_DEVICES with its vendor's device arguments; ARGS are the script's own arguments.
cr_main() {
    local tag=$1
    shift
    local image=${IMAGE:-}
    case "${1:-}" in
        --image) [[ $# -ge 2 ]] || cr_die "--image needs a value"; image=$2; shift 2 ;;
        --image=*) image=${1#--image=}; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) ;;
    esac
    if [[ -z "$image" ]]; then
        [[ "${DRY_RUN:-0}" == 1 ]] || cr_die "no image: set IMAGE or pass --image IMAGE as the first argument"
        image='<IMAGE>'
        cr_warn "no image given (IMAGE or --image): $image in the printed command is a placeholder, not an image; set IMAGE or pass --image IMAGE to run it"
    fi

    cr_runtime
    cr_find_cli
    local container_root=${CACHEROOT_CONTAINER:-/cacheroot}
    [[ "$container_root" == /* ]] || cr_die "CACHEROOT_CONTAINER=$container_root is not an absolute path"
    cr_layout_args "$tag" "$container_root"
    CR_TIER_WATCHER=
    if cr_tier_wanted; then
        CR_TIER_MERGED=${CACHEROOT_MERGED:-$CR_HOST_ROOT.merged}
        [[ "$CR_TIER_MERGED" == /* ]] || cr_die "CACHEROOT_MERGED=$CR_TIER_MERGED is not an absolute path"
        # The container's root is the merged view: render the layout for it instead.
        CACHEROOT=$CR_TIER_MERGED cr_layout_args "$tag" "$container_root"
    fi

    CR_PASS=()
    local -a extra_names=() extra_args=()
    read -ra extra_names <<<"${PASS_ENV:-}"
    cr_pass_env HF_TOKEN BUILDKITE_PARALLEL_JOB BUILDKITE_PARALLEL_JOB_COUNT "${extra_names[@]}"
    read -ra extra_args <<<"${CONTAINER_EXTRA_ARGS:-}"
    cr_hub_args

    # A relative source would be read as a named volume: anchor it at the working directory.
    local artifacts_dir=${ARTIFACTS_DIR:-}
    [[ -z "$artifacts_dir" || "$artifacts_dir" == /* ]] || artifacts_dir=$PWD/$artifacts_dir
    local -a artifacts=()
    if [[ -n "$artifacts_dir" ]]; then
        artifacts=("--volume=$artifacts_dir:${ARTIFACTS_CONTAINER:-/artifacts}")
    fi

    # The checkout: mounted at CHECKOUT_CONTAINER (default /workspace), the session's working
    # directory; CHECKOUT=none for an image that holds the checkout at its own WORKDIR.
    local checkout=${CHECKOUT:-$CR_REPO}
    local -a workspace=()
    if [[ "$checkout" != none ]]; then
        [[ "$checkout" == /* ]] || checkout=$PWD/$checkout
        [[ -f "$checkout/noxfile.py" ]] ||
            cr_die "CHECKOUT=$checkout holds no noxfile.py: point it at a cacheroot checkout, or set CHECKOUT=none when the image holds the checkout at its WORKDIR"
        local inside=${CHECKOUT_CONTAINER:-/workspace}
        [[ "$inside" == /* ]] || cr_die "CHECKOUT_CONTAINER=$inside is not an absolute path"
        workspace=("--volume=$checkout:$inside" "--workdir=$inside")
    fi

    local name=${CI_CONTAINER_NAME:-cacheroot-$tag-${BUILDKITE_JOB_ID:-$$}}
    local session=${NOX_SESSION:-tests-$tag}
    local -a cmd=(
        "$CR_RUNTIME" run --rm "--name=$name"
        "${CR_DEVICES[@]}"
        "--shm-size=${SHM_SIZE:-16g}"
        "${CR_LAYOUT[@]}"
        "${workspace[@]}"
        "${artifacts[@]}"
        "${CR_PASS[@]}"
        "${CR_HUB[@]}"
        "${extra_args[@]}"
        "$image"
        nox -s "$session" "$@"
    )

    if [[ "${DRY_RUN:-0}" == 1 ]]; then
        if cr_tier_wanted; then cr_tier_print before; fi
        cr_print_command "${cmd[@]}"
        if cr_tier_wanted; then cr_tier_print after; fi
        return 0
    fi

    mkdir -p -- "$CR_HOST_ROOT" || cr_die "cannot create the cache volume's host directory $CR_HOST_ROOT"
    if [[ -n "$artifacts_dir" ]]; then
        mkdir -p -- "$artifacts_dir" || cr_die "cannot create ARTIFACTS_DIR=$artifacts_dir"
    fi
    if cr_tier_wanted; then cr_tier_begin; fi
    printf -- '--- Running %s in %s (%s)\n' "$session" "$image" "$CR_RUNTIME"
    cr_run_and_wait "$name" "${cmd[@]}"
    cr_tier_end
    cr_exit_status "$CR_STATUS"
}

# Map the container's exit status to the script's (see "Exit status" in the runners' headers).
cr_exit_status() {
    local status=$1
    if [[ "$status" == 5 ]]; then
        if [[ "${ALLOW_NO_TESTS:-0}" == 1 ]]; then
            printf '%s: pytest collected no tests (exit status 5); ALLOW_NO_TESTS=1, so this counts as success\n' "${0##*/}"
            exit 0
        fi
        cr_die "pytest collected no tests (exit status 5): a wrong selection, or a shard with nothing to run. Fix the selection, or set ALLOW_NO_TESTS=1 where an empty shard is expected" 5
    fi
    exit "$status"
}
