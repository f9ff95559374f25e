#!/usr/bin/env bash
# Install what a fresh machine lacks to run the nox sessions, and say where before writing.
#
# Usage: ci/bootstrap.sh [--prefix DIR] [--e2e] [--upstream] [--no-system-packages]
#
#   - nox and uv, when they are not on PATH: into a virtual environment of their own (TOOLS_DIR),
#     never into the system's Python, with links to their commands in BIN_DIR. This is all that
#     the README's two commands need: shellcheck comes from the package index inside the lint
#     session, and no default session needs a system package.
#   - Where: as a normal user, under HOME as the XDG rules say (TOOLS_DIR
#     $XDG_DATA_HOME/cacheroot/tools, BIN_DIR ~/.local/bin), no root needed. As root, for every
#     user of the machine (/opt/cacheroot/tools, linked from /usr/local/bin), and the first line
#     says so before anything is written. --prefix DIR puts the tool environment in
#     DIR/share/cacheroot/tools and the links in DIR/bin instead, for any user.
#   - --e2e: the system tools of `nox -s e2e` (bubblewrap, openssh-server, sshfs), --upstream:
#     g++ for `nox -s upstream` (torch.compile on CPU), from the distribution's packages with
#     apt-get, as root. Versions are never pinned: apt installs the archive's current ones, and
#     when that upgrades a package already installed (openssh-server pulls the openssh-client of
#     its own version), one line says which before apt runs. Where they cannot be installed (not
#     root, no apt-get), it says which tools are missing and exits 1. --no-system-packages only
#     checks for them.
#
# Running it again changes nothing: a tool found on PATH, or already in TOOLS_DIR, is kept (its
# link is made again if it went missing). Each line of output says what was installed or found,
# and where.
#
# Environment:
#   PYTHON      the interpreter of the tool environment (default python3)
#   TOOLS_DIR   the tool environment (default: see Where above; an XDG_DATA_HOME that is not an
#               absolute path is ignored, as the XDG specification says)
#   BIN_DIR     where the commands are linked (default: see Where above; as a normal user,
#               ~/bin takes the links when it is on PATH and ~/.local/bin is not, so the README's
#               `bash ci/bootstrap.sh && nox ...` finds nox at once). A BIN_DIR outside HOME with a
#               TOOLS_DIR inside it is refused: every user would run one user's files
#
# Exit status: 0 when everything is there; 1 when something could not be installed (the message
# says what to do); 2 for usage errors.
set -euo pipefail

say() {
    printf 'bootstrap: %s\n' "$1"
}

die() {
    printf 'bootstrap: %s\n' "$1" >&2
    exit "${2:-1}"
}

system_packages=1
e2e=0
upstream=0
prefix=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-system-packages) system_packages=0; shift ;;
        --e2e) e2e=1; shift ;;
        --upstream) upstream=1; shift ;;
        --prefix)
            [[ $# -ge 2 && -n "$2" ]] || die "--prefix needs a directory (see --help)" 2
            prefix=$2
            shift 2
            ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" 2 ;;
    esac
done

[[ -z "$prefix" || "$prefix" == /* ]] || die "--prefix $prefix is not an absolute path" 2
prefix=${prefix%/}
[[ -n "${HOME:-}" || -n "$prefix" ]] || die "HOME is not set; pass --prefix DIR, or set HOME" 2
root=0
[[ $(id -u) -eq 0 ]] && root=1
on_path() {
    case ":$PATH:" in
        *":$1:"*) return 0 ;;
    esac
    return 1
}
# Whether PATH $1 lies in HOME.
in_home() {
    [[ -n "${HOME:-}" ]] && [[ "$1" == "${HOME%/}" || "$1" == "${HOME%/}/"* ]]
}
data_home=${XDG_DATA_HOME:-}
[[ "$data_home" == /* ]] || data_home=${HOME:-}/.local/share
# Where the defaults come from, for the line that says where everything goes.
if [[ -n "$prefix" ]]; then
    tools=${TOOLS_DIR:-$prefix/share/cacheroot/tools}
    bin=${BIN_DIR:-$prefix/bin}
    scope="under --prefix $prefix"
elif ((root)) && [[ -z "${TOOLS_DIR:-}" && -z "${XDG_DATA_HOME:-}" ]]; then
    tools=/opt/cacheroot/tools
    bin=${BIN_DIR:-/usr/local/bin}
    scope="for every user of this machine (running as root; --prefix DIR installs elsewhere)"
else
    tools=${TOOLS_DIR:-$data_home/cacheroot/tools}
    if [[ -n "${BIN_DIR:-}" ]]; then
        bin=$BIN_DIR
    else
        bin=$HOME/.local/bin
        if ! on_path "$bin" && on_path "$HOME/bin" && [[ -d "$HOME/bin" && -w "$HOME/bin" ]]; then
            bin=$HOME/bin
        fi
    fi
    scope="for this user"
fi
[[ "$tools" == /* ]] || die "TOOLS_DIR=$tools is not an absolute path" 2
[[ "$bin" == /* ]] || die "BIN_DIR=$bin is not an absolute path" 2
if ! in_home "$bin" && in_home "$tools"; then
    die "BIN_DIR=$bin is outside HOME but TOOLS_DIR=$tools is inside it: every user of $bin would run files of this user's HOME; set TOOLS_DIR outside HOME (such as /opt/cacheroot/tools), or BIN_DIR inside it" 2
fi
python=${PYTHON:-python3}

# The version a tool reports, on one line (nox writes it to stderr).
version() {
    "$1" --version 2>&1 | head -n 1
}

# Link TOOL from the tool environment into BIN_DIR, unless that link is already there.
link() {
    local tool=$1
    mkdir -p -- "$bin" || die "cannot create BIN_DIR=$bin; set BIN_DIR (or --prefix) to a writable directory"
    if [[ "$(readlink -- "$bin/$tool" 2>/dev/null)" != "$tools/bin/$tool" ]]; then
        [[ ! -e "$bin/$tool" || -L "$bin/$tool" ]] ||
            die "$bin/$tool exists and is not a link; move it, or set BIN_DIR to another directory"
        ln -sfn -- "$tools/bin/$tool" "$bin/$tool"
    fi
    linked=1
}
linked=0

wanted=()
present=()
for tool in nox uv; do
    if [[ -x "$tools/bin/$tool" ]]; then
        present+=("$tool")
    elif found=$(command -v "$tool"); then
        say "$tool: found at $found ($(version "$found")), left as it is"
    else
        wanted+=("$tool")
    fi
done
if ((${#wanted[@]})); then
    say "installing ${wanted[*]} $scope: the environment $tools, commands linked in $bin"
fi
for tool in "${present[@]}"; do
    link "$tool"
    say "$tool: already installed in $tools ($(version "$tools/bin/$tool")), linked as $bin/$tool"
done

if ((${#wanted[@]})); then
    requirements=()
    for tool in "${wanted[@]}"; do
        case "$tool" in
            nox) requirements+=("nox>=2024.10.9") ;;
            uv) requirements+=(uv) ;;
        esac
    done
    uv=$tools/bin/uv
    [[ -x "$uv" ]] || uv=$(command -v uv) || uv=
    if [[ -n "$uv" ]]; then
        if [[ ! -f "$tools/pyvenv.cfg" ]]; then
            "$uv" venv --quiet --python "$python" -- "$tools" ||
                die "'uv venv --python $python $tools' failed (see above); set PYTHON or TOOLS_DIR"
        fi
        "$uv" pip install --quiet --python "$tools/bin/python" -- "${requirements[@]}" ||
            die "'uv pip install ${requirements[*]}' into $tools failed (see above)"
    else
        if [[ ! -x "$tools/bin/pip" ]]; then
            "$python" -m venv -- "$tools" ||
                die "'$python -m venv $tools' failed (see above): on Debian, apt-get install -y python3-venv; or set PYTHON to a Python with venv"
        fi
        "$tools/bin/pip" install --quiet --disable-pip-version-check -- "${requirements[@]}" ||
            die "'pip install ${requirements[*]}' into $tools failed (see above): it needs PyPI (or a pip configuration that names a mirror)"
    fi
    for tool in "${wanted[@]}"; do
        link "$tool"
        say "$tool: installed $(version "$tools/bin/$tool") in $tools, linked as $bin/$tool"
    done
fi

if ((linked)) && ! on_path "$bin"; then
    say "$bin is not on PATH: add it (export PATH=\"$bin:\$PATH\") to run the linked commands"
fi

((e2e || upstream)) || exit 0
# The system tools the non-default sessions use, as (command, Debian package) pairs.
missing=()
packages=()
want() {
    local cmd=$1 package=$2
    if [[ "$cmd" == /* ]]; then
        [[ -x "$cmd" ]] && return 0
    elif command -v "$cmd" >/dev/null 2>&1; then
        return 0
    fi
    missing+=("$cmd ($package)")
    packages+=("$package")
}
if ((e2e)); then
    want bwrap bubblewrap
    want /usr/sbin/sshd openssh-server
    want sshfs sshfs
fi
((upstream)) && want g++ g++
if ((${#packages[@]} == 0)); then
    say "system tools: all there, left as they are"
    exit 0
fi
list=$(printf '%s, ' "${missing[@]}")
list=${list%, }
if ((!system_packages)); then
    die "missing: $list; install them with your package manager (or run this script as root without --no-system-packages)"
fi
if ((!root)) || ! command -v apt-get >/dev/null 2>&1; then
    die "missing: $list; this script installs them only as root with apt-get: install them with your package manager"
fi
say "installing ${packages[*]} with apt-get (the archive's current versions)"
apt-get update -qq || die "'apt-get update' failed (see above): the package archive cannot be reached; install ${packages[*]} by other means"
# The plan first, to name what else it changes: a package already installed that apt upgrades.
plan=$(DEBIAN_FRONTEND=noninteractive apt-get install -s -y --no-install-recommends "${packages[@]}" 2>&1) ||
    die "apt-get cannot install ${packages[*]}: $(printf '%s\n' "$plan" | grep -E '^E:' | head -n 3 | paste -sd ' ' -). Install them with your package manager."
upgrades=$(printf '%s\n' "$plan" | sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p' | paste -sd, - | sed 's/,/, /g')
[[ -z "$upgrades" ]] || say "apt-get also upgrades what these need: $upgrades"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null ||
    die "'apt-get install ${packages[*]}' failed (see above)"
say "installed ${packages[*]} (Debian packages)"
