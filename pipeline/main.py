"""Entry point for spark-submit (locally and on EMR Serverless).

    spark-submit --master 'local[*]' pipeline/main.py --events var/events --out var/report
    spark-submit --py-files mq_pipeline.zip main.py --events s3://b/events --out s3://b/report

Locally `mq_pipeline` imports from this file's directory; on EMR from the --py-files zip.
"""

import sys

from mq_pipeline.job import main

if __name__ == "__main__":
    sys.exit(main())
