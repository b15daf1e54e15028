# README.md names every FT_ option of config/options.def (the README must stay true).
. "$(dirname "$0")/lib.sh"
missing=0
for name in $(sed -n 's/^FT_OPT(\([A-Z_]*\),.*/\1/p' config/options.def) CONFIG_FILE; do
    grep -q "FT_$name\b" README.md || { echo "README.md lacks FT_$name" >&2; missing=1; }
done
[ $missing -eq 0 ] || fail "README.md does not list every option"
pass "README.md lists all $(grep -c '^FT_OPT(' config/options.def) options"
