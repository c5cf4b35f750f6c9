#!/usr/bin/env bash
# `robfair fix` of benz-pair-cifar-seeds' PGD-AT model (seed 0) with FRL-RWRM, on CIFAR-10 (JPEG export), CPU size:
# the fix report in docs/results-cifar.md. Run benz-pair-cifar-seeds first:
#   robfair sweep studies/benz-pair-cifar-seeds.yaml && bash studies/fix-cifar-pgd-at.sh [OUT [MORE FIX OPTIONS, e.g. --resume]]
# The fine-tune is the fair-methods-cifar-seeds study's frl row (3 epochs, Adam 5e-4 cosine, crop+flip, 8/255,
# 5-step attack, beta 6, tau 0.05 / 0.05, no pre-training), the validation split the PGD-AT run's own (reused:
# fix --model with a robfair checkpoint keeps it); both audits are that study's (FGSM + PGD-20 on all 10,000 test
# images, batch 500, the probe within 1x their compute, seed 0).
set -euo pipefail
out="${1:-runs/fix-cifar-pgd-at-frl}"
shift || true
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" robfair fix \
  --model "runs/benz-pair-cifar-seeds/pgd-at,seed=0/checkpoints/best.pt" \
  --data cifar10-jpeg,per_class=1250,test_per_class=1000 \
  --method frl-rwrm --opt beta=6 --opt pretrain_epochs=0 --opt tau_nat=0.05 --opt tau_bndy=0.05 \
  --epochs 3 --lr 0.0005 --batch-size 64 --eps 8/255 \
  --set optimizer=adam --set weight_decay=0 --set schedule=cosine --set augment=crop-flip --set channels_last=true \
  --set "attack_options={steps: 5}" --set val_per_class=50 --set val_attack=pgd10 --set select=avg+worst \
  --attack fgsm --attack pgd20 --audit-batch-size 500 --probe 1 --bootstrap 1000 --seed 0 \
  --out "$out" "$@"
