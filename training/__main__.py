"""``python -m training …`` and ``torchrun --nproc_per_node N -m training …`` run `lwm train`."""

from training.cli import train

if __name__ == "__main__":
    train(prog_name="python -m training")
