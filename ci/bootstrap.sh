#!/usr/bin/env bash
# Install what a fresh machine lacks to run the nox sessions, and change nothing that is there.
#
# Usage: ci/bootstrap.sh [--no-system-packages]
#
#   - nox and uv, when they are not on PATH: into a virtual environment of their own (TOOLS_DIR),
#     never into the system's Python, with links to their commands in BIN_DIR (a link in a
#     directory every user runs from, such as /usr/local/bin, never points into one user's HOME).
#     With uv already on PATH, uv builds that environment and installs nox (fast; it uses uv's
#     cache); without it, `python3 -m venv` and that environment's pip install both from PyPI.
#   - shellcheck (the lint session), bubblewrap (the isolated e2e runs), openssh-server and sshfs
#     (the shared-tier e2e runs), g++ (torch.compile on CPU in the upstream session) from Debian's
#     packages, when running as root on a machine with apt-get; --no-system-packages leaves them out.
#     Nothing installed is upgraded: openssh-server is asked for at the installed openssh-client's
#     version, and a plan (apt-get -s) that would upgrade any installed package is refused.
#
# Running it again changes nothing: a tool found on PATH, or already in TOOLS_DIR, is kept (its
# link is made again if it went missing). Each line of output says what was installed or found,
# and where.
#
# Environment:
#   PYTHON      the interpreter of the tool environment (default python3)
#   TOOLS_DIR   the tool environment (default $XDG_DATA_HOME/cacheroot/tools, where XDG_DATA_HOME
#               defaults to ~/.local/share and a value that is not an absolute path is ignored;
#               /opt/cacheroot/tools when the links go to /usr/local/bin and neither TOOLS_DIR nor
#               XDG_DATA_HOME is set)
#   BIN_DIR     where the commands are linked (default: ~/.local/bin when it is on PATH, else the
#               first of /usr/local/bin and ~/bin that is on PATH and writable, so that the
#               README's `bash ci/bootstrap.sh && nox ...` finds nox at once in a root container,
#               else ~/.local/bin, with a note to put it on PATH). /usr/local/bin is passed over
#               when TOOLS_DIR lies in HOME; a BIN_DIR outside HOME with a TOOLS_DIR inside it is
#               refused: every user would run one user's files
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
while [[ $# -gt 0 ]]; do
    case "$1" in
        --no-system-packages) system_packages=0; shift ;;
        -h | --help) sed -n '2,/^$/s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown argument $1 (see --help)" 2 ;;
    esac
done

[[ -n "${HOME:-}" ]] || die "HOME is not set; set TOOLS_DIR and BIN_DIR, or HOME" 2
data_home=${XDG_DATA_HOME:-}
[[ "$data_home" == /* ]] || data_home=$HOME/.local/share
tools=${TOOLS_DIR:-$data_home/cacheroot/tools}
# The tool environment a link shared by every user may point to (see TOOLS_DIR above).
system_tools=/opt/cacheroot/tools
if [[ -z "${TOOLS_DIR:-}" && -z "${XDG_DATA_HOME:-}" ]]; then
    shareable=1
else
    shareable=0
fi
on_path() {
    case ":$PATH:" in
        *":$1:"*) return 0 ;;
    esac
    return 1
}
# Whether PATH $1 lies in HOME.
in_home() {
    [[ "$1" == "${HOME%/}" || "$1" == "${HOME%/}/"* ]]
}
if [[ -n "${BIN_DIR:-}" ]]; then
    bin=$BIN_DIR
else
    bin=$HOME/.local/bin
    if ! on_path "$bin"; then
        for candidate in /usr/local/bin "$HOME/bin"; do
            if [[ "$candidate" == /usr/local/bin ]] && in_home "$tools" && ((!shareable)); then
                continue # a link for every user into one user's HOME
            fi
            if on_path "$candidate" && [[ -d "$candidate" && -w "$candidate" ]]; then
                bin=$candidate
                break
            fi
        done
    fi
fi
[[ "$tools" == /* ]] || die "TOOLS_DIR=$tools is not an absolute path" 2
[[ "$bin" == /* ]] || die "BIN_DIR=$bin is not an absolute path" 2
if ! in_home "$bin" && in_home "$tools"; then
    if ((shareable)); then
        tools=$system_tools
    else
        die "BIN_DIR=$bin is outside HOME but TOOLS_DIR=$tools is inside it: every user of $bin would run files of this user's HOME; set TOOLS_DIR outside HOME (such as $system_tools), or BIN_DIR inside it" 2
    fi
fi
python=${PYTHON:-python3}

# The version a tool reports, on one line (nox writes it to stderr).
version() {
    "$1" --version 2>&1 | head -n 1
}

# Link TOOL from the tool environment into BIN_DIR, unless that link is already there.
link() {
    local tool=$1
    mkdir -p -- "$bin" || die "cannot create BIN_DIR=$bin; set BIN_DIR to a writable directory"
    if [[ "$(readlink -- "$bin/$tool" 2>/dev/null)" != "$tools/bin/$tool" ]]; then
        [[ ! -e "$bin/$tool" || -L "$bin/$tool" ]] ||
            die "$bin/$tool exists and is not a link; move it, or set BIN_DIR to another directory"
        ln -sfn -- "$tools/bin/$tool" "$bin/$tool"
    fi
    linked=1
}
linked=0

wanted=()
for tool in nox uv; do
    if [[ -x "$tools/bin/$tool" ]]; then
        link "$tool"
        say "$tool: already installed in $tools ($(version "$tools/bin/$tool")), linked as $bin/$tool"
    elif found=$(command -v "$tool"); then
        say "$tool: found at $found ($(version "$found")), left as it is"
    else
        wanted+=("$tool")
    fi
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

((system_packages)) || exit 0
packages=()
command -v shellcheck >/dev/null 2>&1 || packages+=(shellcheck)
command -v bwrap >/dev/null 2>&1 || packages+=(bubblewrap)
# The shared-tier e2e runs: a local sshd and one sshfs client per simulated host.
[[ -x /usr/sbin/sshd ]] || packages+=(openssh-server)
command -v sshfs >/dev/null 2>&1 || packages+=(sshfs)
# Inductor's CPU path builds the C++ it generates with the system compiler.
command -v g++ >/dev/null 2>&1 || packages+=(g++)
if ((${#packages[@]} == 0)); then
    say "shellcheck, bubblewrap, sshd, sshfs and g++: found, left as they are"
elif [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${packages[*]} with apt-get"
    apt-get update -qq
    # openssh-server requires the openssh-client of its own version: ask for the installed
    # client's, or apt upgrades the client (which this script promises to leave as it is).
    requested=()
    for package in "${packages[@]}"; do
        client=
        if [[ "$package" == openssh-server ]]; then
            client=$(dpkg-query -W -f='${db:Status-Status} ${Version}' openssh-client 2>/dev/null) || client=
        fi
        if [[ "$client" == "installed "* ]]; then
            requested+=("openssh-server=${client#installed }")
        else
            requested+=("$package")
        fi
    done
    # The plan first: a new version of anything installed (a dependency included) is refused.
    plan=$(DEBIAN_FRONTEND=noninteractive apt-get install -s -y "${requested[@]}" 2>&1) ||
        die "apt-get cannot install ${requested[*]}: $(printf '%s\n' "$plan" | grep -E '^E:' | head -n 3 | tr '\n' ' ')install them with your package manager, or pass --no-system-packages"
    upgrades=$(printf '%s\n' "$plan" | sed -n 's/^Inst \([^ ]*\) \[\([^]]*\)\] (\([^ ]*\).*/\1 \2 -> \3/p' | paste -sd, - | sed 's/,/, /g')
    [[ -z "$upgrades" ]] ||
        die "installing ${requested[*]} would change installed packages ($upgrades), and this script changes nothing that is there: upgrade them yourself first, or install ${packages[*]} yourself, or pass --no-system-packages"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${requested[@]}" >/dev/null
    say "installed ${requested[*]} (Debian packages)"
else
    die "${packages[*]} missing and cannot be installed here (need root and apt-get): install them with your package manager, or pass --no-system-packages"
fi
