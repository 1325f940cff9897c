#!/usr/bin/env bash
# Issue 49, tensor-map weights (wgmma_weights=mapped) against the tiled layout's 1-D bulk copies, in one
# search per problem at T = 4096: every producer variant has a twin that differs only in how its weight
# tiles arrive; each is verified on fresh inputs before it is timed (flytune search), then pair.py pairs them.
set -uo pipefail
K=${CARRY:-$(dirname "$0")}
W=/tmp/map; mkdir -p $W; cp $K/flytune $W/; chmod +x $W/flytune
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache
L=$OUT/map.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $L
$W/flytune --version >>$L 2>&1
BF="atom=wgmma_m64k16_f32_bf16;wgmma_producer=on;wgmma_weights=tiled,mapped;wgmma_tile_m=64,128;wgmma_tile_n=64,128,256;wgmma_stages=4;wgmma_tiles=1,8"
F8="atom=wgmma_m64k32_f32_e4m3;wgmma_producer=on;wgmma_weights=tiled,mapped;wgmma_tile_m=64,128;wgmma_tile_n=128,256;wgmma_stages=4;wgmma_tiles=1"
one() {  # name seconds space problem-args...
  local name=$1 secs=$2 space=$3; shift 3
  local s=$SECONDS
  timeout -k 10 "$secs" $W/flytune search "$@" --tokens ${TOKENS:-4096} --strategy exhaustive --space "$space" --no-baseline \
    --db $W/$name.db --seed 42 --json --allow-missing >$OUT/search-$name.json 2>$OUT/search-$name.err
  echo "$name rc=$? in $((SECONDS - s)) s" >>$L
  python3 $K/pair.py $W/$name.db $name >>$OUT/pairs.txt 2>&1
}
one mixtral-bf16 ${S1:-170} "$BF" --problem mixtral-8x7b
one qwen3-bf16 ${S2:-170} "$BF" --problem qwen3-30b
one mixtral-fp8 ${S3:-170} "$F8" --problem mixtral-8x7b --dtype fp8 --scales per-tensor
cat $L; tail -n 40 $OUT/pairs.txt
