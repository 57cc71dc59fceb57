#!/usr/bin/env bash
# Try agentkeep as a new user would, with a daemon: run in CI by
# tests/unit/cli/test_new_user_script.py, and by hand:
#
#   scripts/try_as_new_user.sh [STATE_DIR]      (AGENTKEEP="python -m agentkeep.cli" to pick one)
#
# `serve` in the background (port 0, found through daemon.json), `talk` twice on one session,
# `session events --after 0`, `session cancel` of a slow turn from another process, `serve`
# stopped with SIGTERM, and the CLI working directly on the same state again. Every wait is bounded; nothing
# is ordered by sleeping. Exits non-zero naming the step that failed.
set -euo pipefail

read -r -a AK <<< "${AGENTKEEP:-agentkeep}"
STATE=${1:-$(mktemp -d)/state}
WORK=$(mktemp -d)
SERVE_PID=""
export AGENTKEEP_HOME=$STATE

fail() { echo "FAILED: $*" >&2; exit 1; }
step() { echo "== $*" >&2; }
json() { "${PYTHON:-python3}" -c "import json, sys; v = json.load(sys.stdin); print($1)"; }
cleanup() { if [[ -n $SERVE_PID ]] && kill -0 "$SERVE_PID" 2>/dev/null; then kill -KILL "$SERVE_PID"; fi; }
trap cleanup EXIT

step "two agent definitions: a quick one, and one on a slow local model"
mkdir -p "$STATE"
cat > "$STATE/providers.toml" <<'TOML'
[providers.slow]
kind = "gym"
class = "demo"
latency_seconds = 2.0
TOML
echo '{"id": "helper", "name": "Helper"}' | "${AK[@]}" agent create - > /dev/null
echo '{"id": "slowpoke", "name": "Slow", "model": {"id": "slow/demo-1"}}' \
  | "${AK[@]}" agent create - > /dev/null

step "serve in the background on a free port"
"${AK[@]}" --json serve --port 0 > "$WORK/serve.out" 2> "$WORK/serve.log" &
SERVE_PID=$!
for _ in $(seq 1200); do  # up to 60 s for a loaded machine
  [[ -s "$STATE/daemon.json" ]] && break
  kill -0 "$SERVE_PID" 2>/dev/null || fail "serve exited: $(tail -3 "$WORK/serve.log")"
  sleep 0.05
done
[[ -s "$STATE/daemon.json" ]] || fail "no daemon.json after 60 s"
URL=$(json 'v["url"]' < "$STATE/daemon.json")
echo "daemon at $URL" >&2

step "talk twice on the same session (through the daemon)"
FIRST=$("${AK[@]}" --json talk helper "What is 12 * 7?")
SESSION=$(echo "$FIRST" | json 'v["turn"]["sessionId"]')
[[ $(echo "$FIRST" | json 'v["answer"]') == "12 * 7 = 84." ]] || fail "first answer: $FIRST"
SECOND=$("${AK[@]}" --json talk helper "How many words are in 'one two three'?" --session "$SESSION")
[[ $(echo "$SECOND" | json 'v["turn"]["sessionId"]') == "$SESSION" ]] || fail "second session"
[[ $(echo "$SECOND" | json 'v["turn"]["number"]') == 2 ]] || fail "second turn: $SECOND"

step "session events --after 0"
EVENTS=$("${AK[@]}" --json session events "$SESSION" --after 0 --limit 1000)
COMPLETED=$(echo "$EVENTS" | json 'sum(e["type"] == "turn.completed" for e in v["events"])')
[[ $COMPLETED == 2 ]] || fail "expected 2 completed turns in the ledger, got $COMPLETED"
FIRST_SEQ=$(echo "$EVENTS" | json 'v["events"][0]["sequence"]')
[[ $FIRST_SEQ == 1 ]] || fail "the ledger starts at $FIRST_SEQ"

step "cancel a slow turn from another process"
SLOW=$("${AK[@]}" --json talk slowpoke "What is 2 + 3?" --background)
SLOW_SESSION=$(echo "$SLOW" | json 'v["turn"]["sessionId"]')
SLOW_TURN=$(echo "$SLOW" | json 'v["turn"]["id"]')
CANCELLED=$("${AK[@]}" --json session cancel "$SLOW_SESSION")
[[ $(echo "$CANCELLED" | json 'v["status"]') == cancelled ]] || fail "cancel: $CANCELLED"

step "stop serve with SIGTERM"
kill -TERM "$SERVE_PID"
for _ in $(seq 600); do
  kill -0 "$SERVE_PID" 2>/dev/null || break
  sleep 0.05
done
kill -0 "$SERVE_PID" 2>/dev/null && fail "serve still running 30 s after SIGTERM"
wait "$SERVE_PID" || fail "serve exited with $?"
SERVE_PID=""
[[ ! -e "$STATE/daemon.json" ]] || fail "daemon.json left behind"

step "the CLI works directly again"
SHOWN=$("${AK[@]}" --json session show "$SLOW_SESSION")
STATUS=$(echo "$SHOWN" | json "[t['status'] for t in v['turns'] if t['id'] == '$SLOW_TURN'][0]")
[[ $STATUS == cancelled ]] || fail "the cancelled turn is $STATUS"
THIRD=$("${AK[@]}" --json talk helper "What is 2 + 2?" --session "$SESSION")
[[ $(echo "$THIRD" | json 'v["turn"]["number"]') == 3 ]] || fail "direct talk: $THIRD"
echo "OK: $STATE" >&2
