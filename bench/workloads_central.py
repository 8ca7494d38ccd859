"""Can each workload's model learn? Train it centrally for a few minutes and print held-out
accuracy.

All training samples are pooled (no sites, no FedAvg); the model is the workload's, trained
with the workload's local optimiser, learning rate and batch size, as `powertrip.core.training`
does on a site. Held-out accuracy is printed every --eval-every seconds on a fixed, seeded subset of
the held-out split and at the end on the whole held-out split (or --final-eval samples), with
chance level (uniform 1/classes and the majority class of the held-out labels).

    .venv/bin/python bench/workloads_central.py --workload shakespeare --minutes 5 --threads 1

Not part of the test suite; figures depend on the machine and on other load on it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def evaluate(workload, model, x, y, batch_size: int = 250) -> tuple[float, float]:
    import torch

    device = next(model.parameters()).device
    model.eval()
    correct, loss_sum = 0, 0.0
    loss_fn = torch.nn.CrossEntropyLoss(reduction="sum")
    with torch.no_grad():
        for start in range(0, len(y), batch_size):
            logits = model(workload.inputs(x[start : start + batch_size]).to(device))
            targets = workload.targets(y[start : start + batch_size]).to(device)
            loss_sum += float(loss_fn(logits, targets))
            correct += int((logits.argmax(dim=1) == targets).sum())
    model.train()
    return correct / len(y), loss_sum / len(y)


def jitter(images, pixels: float):
    """Random small shifts and rotations of a (N, C, H, W) batch, zero (background) fill."""
    import torch
    import torch.nn.functional as F

    n, _, height, _ = images.shape
    angle = (torch.rand(n, device=images.device) * 2 - 1) * (pixels * 4) * torch.pi / 180
    shift = (torch.rand(n, 2, device=images.device) * 2 - 1) * pixels * 2 / height
    cos, sin = torch.cos(angle), torch.sin(angle)
    theta = torch.stack(
        [torch.stack([cos, -sin, shift[:, 0]], 1), torch.stack([sin, cos, shift[:, 1]], 1)], 1
    )
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, align_corners=False, padding_mode="zeros")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", required=True, help="femnist | shakespeare | speech | ...")
    parser.add_argument("--minutes", type=float, default=3.0, help="training time budget")
    parser.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="stop after this many steps even within the time budget (0: no limit); fixes the "
        "work done, so the accuracy reached does not depend on other load on the machine",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--eval-every", type=float, default=30.0, help="seconds between evals")
    parser.add_argument("--eval-samples", type=int, default=2000, help="held-out subset size")
    parser.add_argument("--final-eval", type=int, default=0, help="final eval size (0: all)")
    parser.add_argument("--lr", type=float, help="override the workload's learning rate")
    parser.add_argument("--batch-size", type=int, help="override the workload's batch size")
    parser.add_argument(
        "--optimizer",
        choices=("sgd", "adamw"),
        help="override the workload's local optimiser (the one sites use: sgd, or adamw "
        "for speech)",
    )
    parser.add_argument(
        "--cosine",
        action="store_true",
        help="decay the lr to 0 along a cosine over --max-steps (a ceiling check: sites use "
        "a constant lr)",
    )
    parser.add_argument(
        "--weight-decay",
        type=float,
        default=0.0,
        help="L2 / decoupled weight decay (ceiling check)",
    )
    parser.add_argument("--momentum", type=float, default=0.0, help="SGD momentum (ceiling check)")
    parser.add_argument(
        "--label-smoothing", type=float, default=0.0, help="cross-entropy label smoothing"
    )
    parser.add_argument(
        "--augment",
        type=float,
        default=0.0,
        metavar="PIXELS",
        help="images only: shift each training image by up to this many pixels, with up to "
        "PIXELS x 4 degrees of rotation (a training recipe; the model is unchanged)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | auto")
    parser.add_argument("--data-dir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.cosine and not args.max_steps:
        parser.error("--cosine needs --max-steps (the length of the decay)")
    if args.augment and args.workload != "femnist":
        parser.error("--augment shifts images: it applies to femnist only")

    import torch

    from powertrip.core.training import OPTIMIZERS, eval_subset, resolve_device
    from powertrip.core.workloads import get_workload

    torch.set_num_threads(args.threads)
    workload = get_workload(args.workload)
    lr = args.lr if args.lr is not None else workload.defaults.lr
    batch_size = args.batch_size or workload.defaults.batch_size
    t0 = time.monotonic()
    data = workload.load(args.data_dir, args.seed)
    print(
        f"{workload.name}: {len(data.train)} train / {len(data.test)} held-out samples, "
        f"{len(data.user_names)} users, {data.num_classes} classes "
        f"(loaded in {time.monotonic() - t0:.1f}s from {data.source})"
    )
    torch.manual_seed(args.seed)
    device = resolve_device(args.device)
    model = workload.build_model().to(device)
    params = sum(p.numel() for p in model.parameters())
    args.optimizer = args.optimizer or workload.defaults.optimizer
    extra = {"weight_decay": args.weight_decay}
    if args.optimizer == "sgd":
        extra["momentum"] = args.momentum
    optimizer = OPTIMIZERS[args.optimizer](model.parameters(), lr=lr, **extra)
    schedule = (
        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.max_steps)
        if args.cosine
        else None
    )
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    test_y = data.test.y
    uniform = 1.0 / data.num_classes
    majority = np.bincount(test_y, minlength=data.num_classes).max() / len(test_y)
    print(
        f"model {params:,} parameters; {args.optimizer} lr {lr}"
        f"{' (cosine to 0)' if args.cosine else ''} batch {batch_size}"
        f"{f'; weight decay {args.weight_decay}' if args.weight_decay else ''}"
        f"{f'; momentum {args.momentum}' if args.momentum else ''}"
        f"{f'; label smoothing {args.label_smoothing}' if args.label_smoothing else ''}"
        f"{f'; augment +-{args.augment:g} px' if args.augment else ''}; {device}; "
        f"{args.threads} thread(s); {args.minutes} min"
        + (f" or {args.max_steps} steps" if args.max_steps else "")
    )
    print(f"chance: uniform {uniform:.4f}, majority class of held-out {majority:.4f}")
    ix = eval_subset(len(test_y), args.eval_samples, args.seed)
    ex, ey = data.test.x[ix], test_y[ix]

    rng = np.random.default_rng(args.seed)
    order, pos = rng.permutation(len(data.train)), 0
    steps, epochs, running, train_s = 0, 0, [], 0.0
    budget = args.minutes * 60.0
    next_eval = args.eval_every
    best = 0.0
    model.train()
    print(f"{'train_s':>8} {'steps':>7} {'epochs':>7} {'train_loss':>10} {'acc':>7} {'loss':>7}")
    max_steps = args.max_steps or float("inf")
    while train_s < budget and steps < max_steps:
        start = time.monotonic()
        while time.monotonic() - start < min(next_eval, budget) - train_s and steps < max_steps:
            if pos + batch_size > len(order):
                order, pos, epochs = rng.permutation(len(data.train)), 0, epochs + 1
            batch = order[pos : pos + batch_size]
            pos += batch_size
            optimizer.zero_grad(set_to_none=True)
            inputs = workload.inputs(data.train.x[batch]).to(device)
            if args.augment:
                inputs = jitter(inputs, args.augment)
            logits = model(inputs)
            loss = loss_fn(logits, workload.targets(data.train.y[batch]).to(device))
            loss.backward()
            optimizer.step()
            if schedule:
                schedule.step()
            running.append(float(loss.detach()))
            steps += 1
        train_s += time.monotonic() - start
        next_eval += args.eval_every
        acc, eval_loss = evaluate(workload, model, ex, ey)
        best = max(best, acc)
        train_loss = float(np.mean(running[-200:])) if running else float("nan")
        frac_epochs = epochs + pos / len(order)
        print(
            f"{train_s:8.0f} {steps:7d} {frac_epochs:7.2f} {train_loss:10.4f} {acc:7.4f} "
            f"{eval_loss:7.3f}",
            flush=True,
        )
    fx, fy = data.test.x, test_y
    if args.final_eval and args.final_eval < len(test_y):
        fix = eval_subset(len(test_y), args.final_eval, args.seed + 1)
        fx, fy = fx[fix], fy[fix]
    acc, eval_loss = evaluate(workload, model, fx, fy)
    print(
        f"final: held-out accuracy {acc:.4f} on {len(fy)} samples (loss {eval_loss:.3f}); "
        f"best periodic {best:.4f}; chance uniform {uniform:.4f} / majority {majority:.4f}; "
        f"{acc / uniform:.1f}x uniform chance; {steps} steps in {train_s:.0f}s "
        f"({steps / max(train_s, 1e-9):.1f} steps/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
