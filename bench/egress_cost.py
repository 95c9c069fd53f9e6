"""`python -m bench.egress_cost --size-kb 75 --nat-gateways 3`: the egress table for one size.

The model (direct through NAT gateways against relay through SES, pure arithmetic over
bench/aws-prices.json) is bench/model/egress.py; `make bench` writes its section through
bench.run.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.model.egress import load_prices, markdown_section


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m bench.egress_cost --size-kb 75 --nat-gateways 3`: the table for one size."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--size-kb", type=int, action="append", help="mail size (repeatable)")
    ap.add_argument("--nat-gateways", type=int, default=2, choices=(1, 2, 3))
    ap.add_argument("--prices", help="price list JSON (default bench/aws-prices.json)")
    args = ap.parse_args(argv)
    sizes = [k * 1024 for k in (args.size_kb or [10, 100])]
    print("\n".join(markdown_section(load_prices(args.prices), sizes, args.nat_gateways)))


if __name__ == "__main__":
    main()
