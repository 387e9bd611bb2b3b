#!/usr/bin/env bash
# Job-started hook of a TRUSTED attnwatch runner: the runner that writes the history, holds its
# credentials and keeps the compile cache main runs load. The runner runs this script before
# every job (ACTIONS_RUNNER_HOOK_JOB_STARTED in the runner's .env) and fails the job without
# running a step when it exits non-zero. Install a root-owned copy outside the runner's
# directory, so no job can change it (README, "GPU runners").
#
# Why: a runner label is not a security boundary. Any workflow in the repository, including a
# copy of gpu-bench.yml edited by a pull request, can ask for [self-hosted, trusted]. This hook
# lets through only the jobs the trusted runner is for:
#   - of this repository (ATTNWATCH_TRUSTED_REPO=owner/name),
#   - from an event that runs the default branch's code: push, schedule, workflow_dispatch,
#     workflow_run (pull_request and pull_request_target never),
#   - on the default branch (GITHUB_REF=refs/heads/$ATTNWATCH_TRUSTED_BRANCH, default main),
#   - defined in one of the default branch's workflow files (GITHUB_WORKFLOW_REF), by default
#     the four that ask for the trusted label: gpu-bench.yml, pr-comment.yml, bisect.yml and
#     history-maintain.yml.
# An organization runner group restricted to those workflows (README) is the first gate; this
# hook is the second, and the only one for a repository outside an organization.
set -euo pipefail

repo="${ATTNWATCH_TRUSTED_REPO:?set ATTNWATCH_TRUSTED_REPO=owner/name in the runner .env file}"
branch="${ATTNWATCH_TRUSTED_BRANCH:-main}"
workflows="${ATTNWATCH_TRUSTED_WORKFLOWS:-gpu-bench.yml pr-comment.yml bisect.yml history-maintain.yml}"

refuse() {
  echo "attnwatch trusted runner: refused: $*" >&2
  exit 1
}

[ "${GITHUB_REPOSITORY:-}" = "$repo" ] || refuse "repository '${GITHUB_REPOSITORY:-}' is not $repo"
case "${GITHUB_EVENT_NAME:-}" in
  push | schedule | workflow_dispatch | workflow_run) ;;
  *) refuse "event '${GITHUB_EVENT_NAME:-}': pull-request code runs only on the untrusted runner" ;;
esac
[ "${GITHUB_REF:-}" = "refs/heads/$branch" ] || refuse "ref '${GITHUB_REF:-}' is not refs/heads/$branch"
accepted=""
for workflow in $workflows; do
  if [ "${GITHUB_WORKFLOW_REF:-}" = "$repo/.github/workflows/$workflow@refs/heads/$branch" ]; then
    accepted=1
  fi
done
[ -n "$accepted" ] || refuse "workflow '${GITHUB_WORKFLOW_REF:-}' is not one of [$workflows] on $branch"
echo "attnwatch trusted runner: ${GITHUB_EVENT_NAME} job of ${GITHUB_WORKFLOW_REF} accepted"
