# The timeline drawn (issue #11 part 3): ft-trace --timeline's SVG of a timed trace
# (offload_timing.sh's run of the example model) rendered by headless Chromium. The
# screenshot must be the size of the window asked for (read from the PNG header), have
# content (1% of its pixels off the background colour, 8 colours or more), and show the
# SVG's compute and copy rects in their colours where the SVG puts them (the pixel at
# each one's centre; 9 in 10 at least, as a later rect or a pass line may cover one).
# The checks can fail: an empty SVG's screenshot fails the content check, and a
# truncated SVG's (Chromium's error page above the part it parsed: content, no rect)
# fails the rect check.
#
# Chromium is a test dependency only: without it this prints one SKIP line and passes,
# unless FT_TEST_REQUIRE_BROWSER=1 (.ci/run sets it), which makes that a failure.
# (FT_TEST_: the prefix the shim leaves alone; another FT_ name is warned about in
# every run under it.) No timing is asserted: a screenshot takes from one second to
# several on a loaded machine, and the 60 s timeout is only there to end a hang.
. "$(dirname "$0")/lib.sh"
CHROMIUM=$(command -v chromium || true)
if [ -z "$CHROMIUM" ]; then
    [ "${FT_TEST_REQUIRE_BROWSER:-0}" != 1 ] \
        || fail "no chromium on PATH, and FT_TEST_REQUIRE_BROWSER=1 wants one (apt-get install chromium)"
    echo "  SKIP no chromium on PATH: the timeline is not rendered (apt-get install chromium runs this test)"
    exit 0
fi
FT_TRACE=$BUILD/bin/ft-trace
L=()
W=1280
H=720

# render NAME SVG: $WORK/NAME.png, a screenshot of SVG in a W x H window. A profile, HOME
# and caches of its own under $WORK, so that nothing is left in the user's home.
# --no-sandbox: Chromium's sandbox refuses to start as root. --disable-dev-shm-usage:
# containers often have a small /dev/shm, and Debian's launcher, which adds the flag
# when /dev/shm is small, misreads findmnt when /dev/shm is mounted twice.
render() {
    local name=$1 svg=$2
    mkdir -p "$WORK/home"
    env HOME="$WORK/home" XDG_CONFIG_HOME="$WORK/home/.config" XDG_CACHE_HOME="$WORK/home/.cache" \
        timeout 60 "$CHROMIUM" --headless --disable-gpu --no-sandbox --disable-dev-shm-usage \
        --force-device-scale-factor=1 --user-data-dir="$WORK/profile.$name" \
        --screenshot="$WORK/$name.png" --window-size="$W,$H" "file://$svg" >"$WORK/$name.chromium" 2>&1 \
        || { tail -n 20 "$WORK/$name.chromium" | sed 's/^/    | /' >&2; fail "$name: chromium failed or timed out"; }
    [ -s "$WORK/$name.png" ] || { tail -n 20 "$WORK/$name.chromium" | sed 's/^/    | /' >&2; fail "$name: no screenshot"; }
}

# shot.py PNG WIDTH HEIGHT [SVG]: the checks, on the PNG decoded here (zlib and struct,
# no imaging library). Exit status 1 and one line on stderr when one fails.
cat >"$WORK/shot.py" <<'PY'
import struct, sys, zlib
from collections import Counter
import xml.etree.ElementTree as ET

def read_png(path):
    """(width, height, bytes a pixel, rows): 8-bit RGB or RGBA, not interlaced (what
    Chromium writes); each row unfiltered (filter types 0 to 4)."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        sys.exit(f"{path}: not a PNG")
    pos, ihdr, idat = 8, None, []
    while pos + 8 <= len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", data[pos + 8:pos + 21])
        elif kind == b"IDAT":
            idat.append(data[pos + 8:pos + 8 + n])
        elif kind == b"IEND":
            break
        pos += 12 + n
    w, h, depth, ctype, _, _, interlace = ihdr
    if depth != 8 or ctype not in (2, 6) or interlace:
        sys.exit(f"{path}: bit depth {depth}, colour type {ctype}, interlace {interlace}: want 8-bit RGB(A), not interlaced")
    bpp = 3 if ctype == 2 else 4
    raw, stride, rows = zlib.decompress(b"".join(idat)), w * bpp, []
    prev = bytearray(stride)
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ft == 1:    # Sub
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xff
        elif ft == 2:  # Up
            line = bytearray((a + b) & 0xff for a, b in zip(line, prev))
        elif ft == 3:  # Average
            for i in range(stride):
                line[i] = (line[i] + (((line[i - bpp] if i >= bpp else 0) + prev[i]) >> 1)) & 0xff
        elif ft == 4:  # Paeth
            for i in range(stride):
                a, b, c = (line[i - bpp], prev[i], prev[i - bpp]) if i >= bpp else (0, prev[i], 0)
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xff
        elif ft != 0:
            sys.exit(f"{path}: row {y}: filter type {ft}")
        rows.append(line)
        prev = line
    return w, h, bpp, rows

png, want = sys.argv[1], (int(sys.argv[2]), int(sys.argv[3]))
# The size from the header itself (IHDR is the first chunk: width and height at 16).
size = struct.unpack(">II", open(png, "rb").read(24)[16:24])
if size != want:
    sys.exit(f"{png}: {size[0]}x{size[1]}, want the window's {want[0]}x{want[1]}")
w, h, bpp, rows = read_png(png)
px = lambda x, y: tuple(rows[y][x * bpp:x * bpp + 3])
colours = Counter(px(x, y) for y in range(h) for x in range(w))
bg, n_bg = colours.most_common(1)[0]
if w * h - n_bg < w * h // 100 or len(colours) < 8:
    sys.exit(f"{png}: no content: {w * h - n_bg} of {w * h} pixels differ from the background "
             f"{bytes(bg).hex()}, {len(colours)} colour(s)")
if len(sys.argv) > 4:
    NS = "{http://www.w3.org/2000/svg}"
    root = ET.parse(sys.argv[4]).getroot()
    if float(root.get("width")) > w or float(root.get("height")) > h:
        sys.exit(f"the SVG ({root.get('width')}x{root.get('height')}) does not fit the window")
    # A rect 3 px or more each way has whole pixels inside its 0.5 px stroke: the one at
    # its centre is its fill, unless a later rect or a pass line is drawn over it.
    for cls in ("compute", "copy"):
        rects = [r for r in root.iter(NS + "rect") if r.get("class") == cls
                 and float(r.get("width")) >= 3 and float(r.get("height")) >= 3]
        shown = [r for r in rects if px(int(float(r.get("x")) + float(r.get("width")) / 2),
                                        int(float(r.get("y")) + float(r.get("height")) / 2))
                 == tuple(bytes.fromhex(r.get("fill")[1:]))]
        if not rects or len(shown) < len(rects) * 9 // 10:
            sys.exit(f"{png}: {len(shown)} of the {len(rects)} {cls} rect(s) of 3 px or more show their "
                     f"fill at their centre")
PY

compare_run on --layers 6 --dim 512 --iters 12 --quiet -- FTSIM_TIME_SCALE=0.01 FT_DISCOVERY_ITERS=2 \
    FT_GPU_MEM_LIMIT=5MiB FT_OFFLOAD_TIMING=on FT_TRACE_FILE="$WORK/on.bin"
"$FT_TRACE" --timeline "$WORK/on.svg" "$WORK/on.bin" >/dev/null || fail "ft-trace --timeline failed"
render on "$WORK/on.svg"
python3 "$WORK/shot.py" "$WORK/on.png" $W $H "$WORK/on.svg" 2>"$WORK/on.why" || fail "$(cat "$WORK/on.why")"
pass "--timeline rendered by Chromium: a ${W}x$H screenshot with content, the compute and copy rects in their colours"

printf '<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="190"/>\n' \
    >"$WORK/empty.svg"
render empty "$WORK/empty.svg"
if python3 "$WORK/shot.py" "$WORK/empty.png" $W $H 2>"$WORK/empty.why"; then
    fail "an empty SVG's screenshot passed the content check"
fi
expect_grep 'no content' "$WORK/empty.why" "an empty SVG's screenshot"
# Cut before the first event's rect: Chromium draws its error page and the lanes.
sed '/<rect class="\(compute\|copy\|unload\|miss\|stall\)"/,$d' "$WORK/on.svg" >"$WORK/cut.svg"
render cut "$WORK/cut.svg"
if python3 "$WORK/shot.py" "$WORK/cut.png" $W $H "$WORK/on.svg" 2>"$WORK/cut.why"; then
    fail "a truncated SVG's screenshot passed as the timeline"
fi
expect_grep 'rect\(s\) of 3 px' "$WORK/cut.why" "a truncated SVG's screenshot"
pass "the checks fail: an empty SVG's screenshot has no content, a truncated SVG's lacks the rects"
