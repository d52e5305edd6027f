# Shell helpers shared by the device scripts; source it from the script's own folder:
#   . "$(dirname "$0")/lib.sh"
# shellcheck shell=bash

# wait_for FILE REGEX LIMIT_S: until a line of FILE matches REGEX (0), or LIMIT_S passed (1).
# Polls every 0.5 s; a FILE not written yet counts as no match.
wait_for() {
  local t=0
  until grep -Eq "$2" "$1" 2>/dev/null; do
    sleep 0.5; t=$((t + 1))
    if [ "$t" -ge $(( $3 * 2 )) ]; then return 1; fi
  done
  return 0  # (an until loop's status is its body's last one, not the condition's)
}
