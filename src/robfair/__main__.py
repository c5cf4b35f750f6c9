"""``python -m robfair ...``: the same command line as ``robfair ...``, and what torchrun launches:

    torchrun --nproc-per-node 4 -m robfair audit -m best.pt --data cifar10 --attack pgd20 --out runs/a
"""

from robfair.cli import main

if __name__ == "__main__":
    main()
