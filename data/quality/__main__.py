"""`python -m data.quality`: the quality figures in a terminal, as text or JSON (the README's Quality section says
what each figure means).

    python -m data.quality --data-dir var
    python -m data.quality --data-dir var --prompt av-hazard:2 --json > quality.json
"""

from __future__ import annotations

import argparse
import json
import sys

from data import limits
from data.clips import Filter
from data.errors import DataError
from data.quality import calibration
from data.quality.accuracy import DEFAULT_BY, report
from data.quality.estimates import check_margin, estimate, samples_for
from data.quality.pairs import Scope
from data.quality.reviewers import agreement
from data.quality.tables import format_calibration, format_text


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
        '  python -m data.quality --data-dir var --filter \'{"hazard_level": "high"}\'',
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
    parser.add_argument("--sample", help="the random sample to estimate from (default: the newest, of --job if given)")
    parser.add_argument(
        "--margin", default="5", help="the interval half-width the lead wants, in points (default 5: +/- 5 %%)"
    )
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
        except limits.UnreadableJson as e:
            raise DataError(f'--filter takes a JSON object, for example \'{{"weather": "rain"}}\' ({e})') from None
        f = Filter.from_dict(raw).checked()
        margin = check_margin(args.margin)
        by = [b.strip() for b in args.by.split(",") if b.strip()]
        r = report(db, f, scope, by=by)
        agree = agreement(db, f)
        sample_id = args.sample
        if sample_id is None:
            newest = samples_for(db, scope)
            sample_id = newest[0]["id"] if newest else None
        est = estimate(db, sample_id, margin) if sample_id is not None else None
        if args.json:
            out = {
                "report": r.to_dict(),
                "agreement": agree.to_dict(),
                "estimate": est.to_dict() if est else None,
                "calibration": calibration.calibration(db, f),
            }
            print(json.dumps(out, indent=1, ensure_ascii=False))
        else:
            print(format_text(r, agree, est, detail=args.detail))
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
