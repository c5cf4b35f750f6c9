#!/usr/bin/env bash
# AutoAttack per class for the seed-0 fine-tunes of fair-methods-cifar-seeds (TRADES, FRL-RWRM, FAAL):
# FGSM + PGD-20 as in the study's audit, then the reliability probe on *every* sample they left robust
# (--probe all: the official AutoAttack, standard version, so each class's robust accuracy is exactly
# the worst case over FGSM, PGD-20 and AutoAttack). AutoAttack costs ~3.5 s per robust sample on one
# CPU thread (measured on the 2-core AVX2 VM), so this runs on PER_CLASS test images per class
# (default 200: a seeded stratified subset of the test split, sample seed 0), the three models at once,
# one thread each. Usage: bash studies/autoattack-fair-cifar.sh [STUDY] [OUT] [PER_CLASS]
set -euo pipefail
study=${1:-runs/fair-methods-cifar-seeds}
out=${2:-runs/autoattack-fair-cifar}
per_class=${3:-200}
mkdir -p "$out"
audit() {  # one model: $1 = the study's run name
  OMP_NUM_THREADS=1 robfair audit --model "$study/$1/checkpoints/best.pt" \
    --data "cifar10-jpeg,test_per_class=$per_class" --split test --attack fgsm --attack pgd20 --eps 8/255 \
    --probe all --bootstrap 1000 --device cpu --batch-size 128 --out "$out/${1%%,*}.json" > "$out/${1%%,*}.log" 2>&1
}
audit "trades,seed=0" & audit "frl,seed=0" & audit "faal,seed=0" & wait
