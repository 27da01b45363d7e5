"""`python -m data.quality`: the quality figures in a terminal, as text or JSON (the README's Quality section says
what each figure means), every sample's decision first, the most urgent in full; and the two things a lead changes from
there: a label's target (`--set-target`) and a further round of the sample (`--draw-more`).

    python -m data.quality --data-dir var
    python -m data.quality --data-dir var --prompt av-hazard:2 --json > quality.json
    python -m data.quality --data-dir var --set-target hazard_level=0.95 --confidence 99
    python -m data.quality --data-dir var --sample 4 --draw-more
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys

from data import limits
from data.clips import Filter
from data.errors import DataError, UnreadableJson
from data.quality import calibration, rounds, targets
from data.quality.accuracy import DEFAULT_BY, report
from data.quality.decision import decide, decisions
from data.quality.estimates import check_margin, estimate
from data.quality.pairs import Scope
from data.quality.reviewers import agreement
from data.quality.tables import decision_text, format_calibration, format_text, held_text

# who is at the terminal: someone who can open the database file, as a lead (like the other command lines)
CLI_ROLE = "lead"


def _set_targets(db, pairs: list[str], confidence: str | None, user: str) -> list[str]:
    """`--set-target LABEL=TARGET` (each) with `--confidence`: stored, and said back."""
    out = []
    for pair in pairs:
        label, sep, value = pair.partition("=")
        if not sep:
            raise DataError(f"--set-target takes LABEL=TARGET, for example hazard_level=0.95 (got {pair[:40]!r}).")
        t = targets.set_target(db, label.strip(), value, confidence, actor=user, role=CLI_ROLE)
        what = "no target" if t.target is None else f"{t.target:.3f} at {t.confidence:.1%} confidence"
        out.append(f"{t.label}: {what}")
    return out


def _draw_more(db, sample_id, how_many: str, user: str) -> str:
    """`--draw-more [N]`: N more clips (default: what the decision asks) into the sample, for its people."""
    if how_many == "decision":
        d = decide(db, sample_id)
        if d.draw <= 0:
            why = "nothing to draw: " + (
                f"{d.pending:,} drawn clips wait for review" if d.pending else f"the decision is {d.verdict}"
            )
            raise DataError(f"Sample {d.sample['id']}: {why}.")
        how_many = str(d.draw)
    r = rounds.draw_more(db, sample_id, how_many, actor=user, role=CLI_ROLE)
    shares = ", ".join(f"{p} {n:,}" for p, n in r["assigned"].items()) or "nobody new"
    held = held_text(r)
    return (
        f"Drew {r['round_drawn']:,} more clips into sample {r['id']} (round {r['round']}, seed {r['round_seed']}), "
        f"assigned to {shares}{'; ' + held if held else ''}: {r['drawn']:,} of its batch's {r['population']:,} "
        "clips drawn in all."
    )


def main(argv: list[str] | None = None) -> int:
    from data import settings as settings_mod
    from data.db import connect

    parser = argparse.ArgumentParser(
        prog="python -m data.quality",
        description="How good the machine captions are, measured against what reviewers approved: per label "
        "accuracy, reviewers' agreement (kappa), the text's edit ratio, and the estimate from a random sample. "
        "The README's Quality section says what each figure means.",
        epilog="examples:\n"
        "  python -m data.quality --data-dir var\n"
        "  python -m data.quality --data-dir var --prompt av-hazard:2 --detail\n"
        "  python -m data.quality --data-dir var --job 12 --margin 3\n"
        "  python -m data.quality --db var/workbench.db --by model,prompt,job --json > quality.json\n"
        '  python -m data.quality --data-dir var --filter \'{"hazard_level": "high"}\'\n'
        "  python -m data.quality --data-dir var --set-target hazard_level=0.95 --confidence 99\n"
        "  python -m data.quality --data-dir var --set-target ego_maneuver=none\n"
        "  python -m data.quality --data-dir var --sample 4 --draw-more",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--job", help="only machine captions written by this job (and its samples)")
    parser.add_argument("--prompt", help="only machine captions of this prompt: NAME or NAME:VERSION")
    parser.add_argument("--model", help="only machine captions of this model")
    parser.add_argument(
        "--by", default=",".join(DEFAULT_BY), help="group by any of model,prompt,job (default model,prompt; '' for all)"
    )
    parser.add_argument(
        "--filter", help='only clips of this Browse filter, as JSON (for example \'{"weather": "rain"}\')'
    )
    parser.add_argument(
        "--sample", help="the random sample to decide and estimate from (default: the most urgent decision's, of --job)"
    )
    parser.add_argument(
        "--margin", default="5", help="the interval half-width the lead wants, in points (default 5: +/- 5 %%)"
    )
    parser.add_argument(
        "--set-target",
        action="append",
        default=[],
        metavar="LABEL=TARGET",
        help="the accuracy a batch's LABEL must reach to be accepted (0.95 or 95; none: not required); repeatable",
    )
    parser.add_argument(
        "--confidence", help="with --set-target: how sure the decision must be, in %% (default: the label's current)"
    )
    parser.add_argument(
        "--draw-more",
        nargs="?",
        const="decision",
        metavar="N",
        help="draw N more clips into the sample from the rest of its batch, for its people (no N: as many as the "
        "decision asks)",
    )
    parser.add_argument("--user", default=f"cli:{getpass.getuser()}", help="who sets targets or draws (audited)")
    parser.add_argument("--detail", action="store_true", help="per-class precision and recall, confusion matrices")
    parser.add_argument("--json", action="store_true", help="everything as one JSON object")
    settings_mod.add_arguments(parser, ["data_dir", "db"])
    args = parser.parse_args(argv)
    s = settings_mod.from_args(args)
    if not s.db.exists():
        print(f"error: no database at {s.db}", file=sys.stderr)
        return 2
    db = connect(s.db)
    try:
        scope = Scope.of(job=args.job, prompt=args.prompt, model=args.model)
        try:
            raw = limits.outside_json(args.filter, "--filter") if args.filter else {}
        except UnreadableJson as e:
            raise DataError(f'--filter takes a JSON object, for example \'{{"weather": "rain"}}\' ({e})') from None
        f = Filter.from_dict(raw).checked()
        margin = check_margin(args.margin)
        by = [b.strip() for b in args.by.split(",") if b.strip()]
        if args.confidence is not None and not args.set_target:
            raise DataError("--confidence goes with --set-target LABEL=TARGET (the labels it applies to).")
        said = _set_targets(db, args.set_target, args.confidence, args.user)
        sample_id = args.sample
        listed = [d for d in decisions(db) if scope.job_id is None or d.sample.get("job_id") == scope.job_id]
        if sample_id is None:  # the most urgent decision (fix, review more, accept), not the newest sample's
            sample_id = listed[0].sample["id"] if listed else None
        if args.draw_more is not None:
            if sample_id is None:
                raise DataError("--draw-more needs a sample: none is drawn yet (Browse, Random review sample).")
            said.append(_draw_more(db, sample_id, args.draw_more, args.user))
        r = report(db, f, scope, by=by)
        agree = agreement(db, f)
        est = estimate(db, sample_id, margin) if sample_id is not None else None
        dec = decide(db, sample_id) if sample_id is not None else None
        if args.json:
            out = {
                "decision": dec.to_dict() if dec else None,
                "decisions": [
                    {"sample_id": d.sample["id"], "verdict": d.verdict, "more": d.more, "draw": d.draw} for d in listed
                ],
                "targets": {k: t.to_dict() for k, t in targets.get_all(db).items()},
                "report": r.to_dict(),
                "agreement": agree.to_dict(),
                "estimate": est.to_dict() if est else None,
                "calibration": calibration.calibration(db, f),
            }
            print(json.dumps(out, indent=1, ensure_ascii=False))
        else:
            for line in said:
                print(line)
            if len(listed) > 1:
                print("Every sample's decision, the most urgent first (the first in full below; --sample ID another):")
                for d in listed:
                    print("  sample " + f"{d.sample['id']}: " + decision_text(d).partition(": ")[0])
                print()
            if dec is None:
                print(
                    "Decision: no random sample is drawn yet (Browse, Random review sample): nothing to decide from.\n"
                )
            print(format_text(r, agree, est, detail=args.detail, decision=dec))
            if args.detail:
                print(format_calibration(calibration.calibration(db, f)))
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    finally:
        db.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
