#!/bin/sh
# Install the real MCP clients the e2e tests drive (e2e/clients_test.go)
# into a cache directory, once: Claude Code, Gemini CLI, Codex CLI and the
# MCP Inspector, at the versions internal/clientsetup was checked at.
#   scripts/agent-clients.sh [CACHE]   (default $SLUICE_NPM_CACHE, else /var/cache/sluice-npm)
# Prints CACHE. Exit 0 installed (or already cached), 3 when npm or the
# registry cannot be reached (the tests then skip loudly), 1 otherwise.
set -eu
cache=${1:-${SLUICE_NPM_CACHE:-/var/cache/sluice-npm}}
pkgs="claude:@anthropic-ai/claude-code@2.1.332 gemini:@google/gemini-cli@0.61.0 codex:@openai/codex@0.171.0 inspector:@modelcontextprotocol/inspector@2.12.0"
command -v npm >/dev/null 2>&1 || { echo "agent-clients: npm not found" >&2; exit 3; }
for p in $pkgs; do
	dir=$cache/${p%%:*} spec=${p#*:}
	name=${spec%@*} version=${spec##*@}
	if [ -f "$dir/node_modules/$name/package.json" ] &&
		grep -q "\"version\": *\"$version\"" "$dir/node_modules/$name/package.json"; then
		continue
	fi
	mkdir -p "$dir"
	echo "agent-clients: installing $spec into $dir" >&2
	if ! npm install --prefix "$dir" --no-audit --no-fund "$spec" >"$dir/install.log" 2>&1; then
		if grep -qE 'ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ETIMEDOUT|ECONNRESET|network' "$dir/install.log"; then
			echo "agent-clients: the npm registry is unreachable (see $dir/install.log)" >&2
			exit 3
		fi
		cat "$dir/install.log" >&2
		exit 1
	fi
done
echo "$cache"
