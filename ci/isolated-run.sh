#!/usr/bin/env bash
# Run a command as if in a fresh CI container that shares only the cache volume with other runs.
#
# Usage: ci/isolated-run.sh [--tag cuda|rocm] [--bind SRC DEST]... [--setenv NAME VALUE]...
#                           [--] COMMAND [ARGS...]
#        ci/isolated-run.sh --check
#
# Machines without a container engine can still prove what the CI volume promises. The command
# runs under bubblewrap in new mount, network, PID, IPC and UTS namespaces, on a root built from
# read-only host pieces (/usr, /etc and the /bin, /lib links), with:
#   - a fresh HOME and a fresh /tmp (tmpfs: gone when the command exits);
#   - loopback-only networking (a new network namespace has only `lo`, which bubblewrap brings up);
#   - the cache volume bind-mounted read-write at CACHEROOT_CONTAINER (default /cacheroot);
#   - the repository, the virtual environment and its base interpreter bind-mounted read-only, at
#     their host paths, with the venv's bin first on PATH and the repository as working directory;
#   - an empty environment but for PATH, HOME, TMPDIR, LANG, PYTHONDONTWRITEBYTECODE, and the
#     cache layout: the same `--env` arguments that `cacheroot env --format docker` gives the CI
#     containers (so CACHEROOT is the container path), set here with --setenv.
# --bind adds a read-write bind mount (e.g. a directory for reports); --setenv adds a variable.
#
# Environment:
#   CACHEROOT              the host directory of the volume (default: the CLI's default root)
#   CACHEROOT_CONTAINER    its path inside (default /cacheroot)
#   CACHEROOT_CLI          the cacheroot command (default: the venv's, then the one on PATH)
#   ISOLATED_REPO          the repository (default: the checkout that holds this script)
#   ISOLATED_VENV          the virtual environment (default: $ISOLATED_REPO/.venv)
#   ISOLATED_HOME          HOME inside (default /home/isolated)
#   DRY_RUN=1              print the exact command, shell-quoted on one line, and run nothing
#
# Exit status: the command's; 2 for usage errors; 77 (the automake "skipped" status) when
# bubblewrap is missing or this machine does not permit the namespaces, with the reason on
# stderr. `--check` only probes: 0 when isolated runs work here, else 77 and the reason.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

SKIPPED=77

# Exit with SKIPPED (and the reason) unless bubblewrap can create the namespaces here.
probe() {
    command -v bwrap >/dev/null 2>&1 ||
        cr_die "bubblewrap (bwrap) is not installed: apt-get install -y bubblewrap" "$SKIPPED"
    local out
    if ! out=$(bwrap --ro-bind / / --unshare-net --unshare-pid --unshare-ipc --unshare-uts \
        --tmpfs /tmp true 2>&1); then
        cr_die "this machine does not permit the namespaces bubblewrap needs: ${out:-bwrap failed}" "$SKIPPED"
    fi
}

tag=
extra=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --check) probe; exit 0 ;;
        --tag) [[ $# -ge 2 ]] || cr_die "--tag needs a value"; tag=$2; shift 2 ;;
        --bind)
            [[ $# -ge 3 ]] || cr_die "--bind needs SRC and DEST"
            [[ -d "$2" ]] || cr_die "--bind source $2 is not a directory"
            extra+=(--bind "$2" "$3"); shift 3 ;;
        --setenv)
            [[ $# -ge 3 ]] || cr_die "--setenv needs NAME and VALUE"
            extra+=(--setenv "$2" "$3"); shift 3 ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        --) shift; break ;;
        -*) cr_die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || cr_die "no command given (see --help)"

here=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(cd -- "${ISOLATED_REPO:-$here/..}" && pwd -P) || cr_die "ISOLATED_REPO=$ISOLATED_REPO is not a directory"
venv=${ISOLATED_VENV:-$repo/.venv}
[[ -f "$venv/pyvenv.cfg" ]] ||
    cr_die "$venv is not a virtual environment (no pyvenv.cfg): create it in the clone with 'uv sync' (or 'python3 -m venv .venv && .venv/bin/pip install .'), or set ISOLATED_VENV to one that has cacheroot installed"
venv=$(cd -- "$venv" && pwd -P)
home=${ISOLATED_HOME:-/home/isolated}
container_root=${CACHEROOT_CONTAINER:-/cacheroot}
[[ "$container_root" == /* ]] || cr_die "CACHEROOT_CONTAINER=$container_root is not an absolute path"

if [[ -z "${CACHEROOT_CLI:-}" && -x "$venv/bin/cacheroot" ]]; then
    CACHEROOT_CLI=$venv/bin/cacheroot
fi
cr_find_cli
cr_layout_args "$tag" "$container_root"

# The venv's base interpreter lives outside it (pyvenv.cfg `home` is its bin directory).
base=$(sed -n 's/^home *= *//p' "$venv/pyvenv.cfg")
base=${base%/bin}

# The root: read-only system pieces; the merged-/usr links (/bin -> usr/bin) stay links.
sandbox=(bwrap --die-with-parent --new-session
    --unshare-net --unshare-pid --unshare-ipc --unshare-uts
    --ro-bind /usr /usr --ro-bind /etc /etc --proc /proc --dev /dev)
for dir in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [[ -L "$dir" ]]; then
        sandbox+=(--symlink "$(readlink "$dir")" "$dir")
    elif [[ -d "$dir" ]]; then
        sandbox+=(--ro-bind "$dir" "$dir")
    fi
done
sandbox+=(--tmpfs /tmp --tmpfs "$home")
sandbox+=(--bind "$CR_HOST_ROOT" "$container_root")
sandbox+=(--ro-bind "$repo" "$repo" --ro-bind "$venv" "$venv")
if [[ -n "$base" && "$base" != /usr && "$base" != /usr/* ]]; then
    sandbox+=(--ro-bind "$base" "$base")
fi
sandbox+=(--chdir "$repo" --clearenv
    --setenv PATH "$venv/bin:/usr/local/bin:/usr/bin:/bin"
    --setenv HOME "$home" --setenv TMPDIR /tmp --setenv LANG C.UTF-8
    --setenv PYTHONDONTWRITEBYTECODE 1)
for arg in "${CR_LAYOUT[@]}"; do
    if [[ "$arg" == --env=*=* ]]; then
        arg=${arg#--env=}
        sandbox+=(--setenv "${arg%%=*}" "${arg#*=}")
    fi
done
sandbox+=("${extra[@]}" -- "$@")

if [[ "${DRY_RUN:-0}" == 1 ]]; then
    cr_print_command "${sandbox[@]}"
    exit 0
fi
probe
mkdir -p -- "$CR_HOST_ROOT" || cr_die "cannot create the volume's host directory $CR_HOST_ROOT"
exec "${sandbox[@]}"
