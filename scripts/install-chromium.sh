#!/usr/bin/env bash
# Makes a headless Chromium available for tests/test_browser.py, from the system's package manager only
# (Playwright's own browser download is never used: the test drives /usr/bin/chromium).
#
#   bash scripts/install-chromium.sh     # exit 0 when Chromium is there afterwards, 1 otherwise (with the reason)
#   LOCK_WAIT_S=300 bash scripts/...     # wait longer for another apt process to release its locks (default 120 s)
#
# Installs Debian/Ubuntu's `chromium` with apt-get when it is missing and this user may install packages
# (root, or sudo without a password). Anything else: prints why and what to do instead.
set -u

find_chromium() {
    for candidate in "${CHROMIUM:-}" /usr/bin/chromium /usr/bin/chromium-browser; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

if found=$(find_chromium); then
    echo "chromium: found $found ($("$found" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium: not found, and this system has no apt-get. Install Chromium with your package manager" \
         "and point CHROMIUM=/path/to/chromium at it; until then the browser test skips (fails under CI=true)." >&2
    exit 1
fi

if [ "$(id -u)" -eq 0 ]; then
    as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    as_root=(sudo -n)
else
    echo "chromium: not found, and installing it needs root (no passwordless sudo here). Run" \
         "'sudo apt-get install chromium' yourself; until then the browser test skips (fails under CI=true)." >&2
    exit 1
fi

# Another apt process (unattended-upgrades, cloud-init, a parallel job) may hold apt's locks for a while: wait for
# it rather than fail. DPkg::Lock::Timeout makes apt wait for dpkg's lock; `apt-get update` takes the package
# lists' lock (/var/lib/apt/lists/lock), which that option does not cover on every apt, so update is retried
# until LOCK_WAIT_S have passed while its error is a lock held by someone else.
LOCK_WAIT_S=${LOCK_WAIT_S:-120}
apt_get=("${as_root[@]}" apt-get -o "DPkg::Lock::Timeout=$LOCK_WAIT_S")

update_waiting_for_the_lists_lock() {
    local deadline=$((SECONDS + LOCK_WAIT_S)) log
    log=$(mktemp)
    while true; do
        if "${apt_get[@]}" update -q 2>"$log"; then
            cat "$log" >&2
            rm -f "$log"
            return 0
        fi
        cat "$log" >&2
        if ! grep -q "Could not get lock" "$log" || [ "$SECONDS" -ge "$deadline" ]; then
            rm -f "$log"
            return 1
        fi
        echo "chromium: another apt process holds the package lists' lock; waiting (up to ${LOCK_WAIT_S} s)" >&2
        sleep 5
    done
}

echo "chromium: installing Debian's chromium with apt-get (a few minutes the first time)"
export DEBIAN_FRONTEND=noninteractive
if ! update_waiting_for_the_lists_lock; then
    echo "chromium: 'apt-get update' failed (see its error above: no network, no package mirror, or apt's lock" \
         "still held after ${LOCK_WAIT_S} s); the browser test cannot run." >&2
    exit 1
fi
# Debian names the package chromium; older Ubuntu releases chromium-browser (a snap shim on newer ones).
if ! "${apt_get[@]}" install -y -q --no-install-recommends chromium fonts-dejavu-core; then
    if ! "${apt_get[@]}" install -y -q --no-install-recommends chromium-browser; then
        echo "chromium: apt-get could not install chromium; the browser test cannot run." >&2
        exit 1
    fi
fi

if found=$(find_chromium); then
    echo "chromium: installed $found ($("$found" --version 2>/dev/null || echo 'version unknown'))"
    exit 0
fi
echo "chromium: apt-get finished but no chromium binary is on the usual paths; set CHROMIUM=/path/to/it." >&2
exit 1
