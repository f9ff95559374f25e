#!/usr/bin/env bash
# Run the test suite in a ROCm container with the cache volume mounted.
#
# Usage: ci/run-amd-test.sh [--image IMAGE] [ARGS...]
#   Runs `nox -s tests-rocm ARGS...` in IMAGE (e.g. `-- -k gsm8k` to pass `-k gsm8k` to pytest).
#
# The cache: the host's cache root (CACHEROOT, else the cacheroot CLI's default root) is mounted at
# CACHEROOT_CONTAINER (default /cacheroot), and every cache variable of the layout is set for it.
# All those `--volume`/`--env` arguments come from `cacheroot env --format docker --tag rocm`:
# this script names none of them, so a variable added to the layout table needs no edit here.
#
# The image: what IMAGE must hold (Python, nox, uv, a compiler, the vendor's runtime) is in
# docs/ci-image.md, and ci/Dockerfile builds one.
#
# Environment:
#   IMAGE                  the image (or --image as the first argument)
#   CONTAINER_RUNTIME      docker (default) or podman
#   CACHEROOT              the host directory of the cache volume
#   CACHEROOT_CONTAINER    where it is mounted inside (default /cacheroot)
#   CACHEROOT_CLI          the cacheroot command (default: the one on PATH)
#   CHECKOUT               the cacheroot checkout to mount (default: the one holding this script),
#                          or `none` when the image holds the checkout at its WORKDIR
#   CHECKOUT_CONTAINER     where it is mounted, and the session's working directory (default
#                          /workspace)
#   CACHEROOT_SHARED       the fleet's shared cache (NFS, a PVC): the container then mounts the
#                          merged view of CACHEROOT over it (`cacheroot tier up`), which a
#                          watchdog `cacheroot tier sync --watch` and a final sync push back
#   CACHEROOT_MERGED       where that merged view goes (default <CACHEROOT>.merged)
#   TIER_SYNC_EVERY        seconds between the watchdog's syncs (default 300)
#   RENDER_DEVICES         render nodes to pass, space-separated (default: every /dev/dri/renderD*)
#   SHM_SIZE               --shm-size (default 16g)
#   NOX_SESSION            session to run (default tests-rocm; `warm` pre-populates the volume)
#   ARTIFACTS_DIR          host directory mounted at ARTIFACTS_CONTAINER (default /artifacts)
#   HUB                    the hub cache (docs/hub.md): `session` (default) starts one for the
#                          tests (PYTEST_ADDOPTS=--cacheroot-hub), its store on the volume; a
#                          URL (http://HOST:PORT) points HF_ENDPOINT at a running one; `off`
#   PASS_ENV               more variable names to pass through, space-separated
#   CONTAINER_EXTRA_ARGS   more runtime arguments, split on whitespace
#   CI_CONTAINER_NAME      the container's name (default cacheroot-rocm-$BUILDKITE_JOB_ID)
#   HF_TOKEN, BUILDKITE_PARALLEL_JOB, BUILDKITE_PARALLEL_JOB_COUNT
#                          passed through as `--env=NAME` when set (values are never printed)
#   DRY_RUN=1              print the exact command, shell-quoted on one line, and run nothing;
#                          without an image it prints the placeholder <IMAGE> and says so
#   ALLOW_NO_TESTS=1       accept exit status 5, see below
#
# Exit status: the container's. Status 5 is pytest's "no tests collected": that hides a broken
# selection, so it fails the job with a message and status 5, unless ALLOW_NO_TESTS=1 (a shard
# that may legitimately be empty), where it counts as success. 2: this script's own usage errors.
# Interrupted (INT/TERM/HUP): the container is removed, status 128+signal.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname -- "${BASH_SOURCE[0]}")/lib.sh"

# The ROCm devices: the KFD compute interface and each DRM render node, with the groups that own
# them on the host (numeric, from the host, since an image may lack a `render` group).
CR_DEVICES=(--device=/dev/kfd)
if [[ -n "${RENDER_DEVICES:-}" ]]; then
    read -ra render_nodes <<<"$RENDER_DEVICES"
else
    shopt -s nullglob
    render_nodes=(/dev/dri/renderD*)
    shopt -u nullglob
fi
if [[ ${#render_nodes[@]} -eq 0 ]]; then
    cr_warn "no /dev/dri/renderD* node found (set RENDER_DEVICES): the container will see no GPU"
fi
for node in "${render_nodes[@]}"; do
    CR_DEVICES+=("--device=$node")
done
for group in video render; do
    gid=$(getent group "$group" 2>/dev/null | cut -d: -f3) || gid=
    CR_DEVICES+=("--group-add=${gid:-$group}")
done

cr_main rocm "$@"
