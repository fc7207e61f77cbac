#!/usr/bin/env bash
# Fetch the JavaScript/CSS that asv's dashboard loads from CDNs, for viewing it offline or in CI.
# asv's index.html pulls jQuery 3.3.1, flot 0.8.3 (+ time, selection, categories), flot-orderbars,
# stupidtable, blueimp-md5 and Bootstrap 3.1.1 from code.jquery.com / cdnjs / jsdelivr. Hosts that
# reach only package registries (this project's CI) get the same releases through npm instead, and
# tools/render_dashboard.py --deps DIR serves these files in place of the CDN URLs.
# Usage: tools/asv_www_deps.sh [DIR]   (default .asv/www-deps; .asv/ is git-ignored)
set -euo pipefail
dest=${1:-.asv/www-deps}
if [ -s "$dest/jquery-3.3.1.min.js" ] && [ -s "$dest/bootstrap.min.css" ]; then exit 0; fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent jquery@3.3.1 flot@0.8.3 flot-orderbars@1.0.0 stupid-table-plugin@1.1.3 \
  blueimp-md5@2.19.0 bootstrap@3.1.1 >/dev/null 2>npm.log) || { cat "$tmp/npm.log" >&2; exit 1; }
for f in "$tmp"/*.tgz; do d="$tmp/x/$(basename "$f" .tgz)"; mkdir -p "$d"; tar -xzf "$f" -C "$d"; done
x=$tmp/x
# Named as the CDN files are, so the page's URLs map by their last path component.
cp "$x"/jquery-3.3.1/package/dist/jquery.min.js "$dest/jquery-3.3.1.min.js"
for p in flot time selection categories; do
  src=$x/flot-0.8.3/package/jquery.flot.$p.js; [ "$p" = flot ] && src=$x/flot-0.8.3/package/jquery.flot.js
  name=jquery.flot.$p.min.js; [ "$p" = flot ] && name=jquery.flot.min.js
  cp "$src" "$dest/$name"
done
cp "$x"/flot-orderbars-1.0.0/package/js/jquery.flot.orderBars.js "$dest/"
cp "$x"/stupid-table-plugin-1.1.3/package/stupidtable.min.js "$dest/"
cp "$x"/blueimp-md5-2.19.0/package/js/md5.min.js "$dest/"
cp "$x"/bootstrap-3.1.1/package/dist/js/bootstrap.min.js "$x"/bootstrap-3.1.1/package/dist/css/bootstrap.min.css "$dest/"
ls "$dest"
