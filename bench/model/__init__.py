"""The cost and scale models: what the queue costs and how far it scales, from measured runs.

Part of the product's claims (docs/benchmarks.md, docs/cost.md, docs/deploy.md), so laid
out as a product: one module per thing priced or modelled, each tested as such
(tests/bench/model/). The runners that measure and print them are bench/'s modules
(`python -m bench.run`, bench.mix, bench.egress_cost, ...); nothing here starts the local
stack or a process.

- `prices`: the price list (bench/aws-prices.json), the month, the volumes, a priced line
- `assumptions`: what the models assume rather than measure
- `run`: the measured inputs of one run (`Run`)
- `template`: the template's settings as the models read them (`Template`)
- `dynamodb`: DynamoDB's size and unit rules, index projections, write units
- `state_table`: the queue's state table priced (writes, reads, failed writes, counters)
- `stream`: the table's stream and the events function's event source
- `sqs`, `s3`, `awslambda`, `secretsmanager`, `apigateway`, `cloudwatch`, `xray`: each
  service's lines of the bill
- `egress`: NAT gateways and data transfer (EgressMode=direct) against SES relay
- `autoscale`: DynamoDB auto scaling, simulated (provisioned capacity's use)
- `memory`: Lambda memory sizes priced and chosen
- `month`, `bill`: a month's traffic at a volume and the bill it adds up to; the floors
- `report`: the cost model's tables
- `trace`: one AWS request of a run as the scale model reads it
- `scale`: AWS's documented per-request limits under the measured mix
- `limits`: every other limit on a mail's path at 10,000 mails/s
"""
