"""latency: how fast the solver samples, timed on every pass over its samples.

    latency_ms_per_image     1000 · Σ solver seconds / N   (model evaluations included, in
                             batches of `batch_size`, on one evaluator's device)
    throughput_images_per_s  N / wall seconds of the whole pass over all evaluators

Every pass over samples reports it, whatever else it scores; `--metrics latency` asks for it alone.
"""

from typing import Any

from spanlift.platform.evaluation.metrics.base import METRICS, Done, Finished, Row, SampleMetric

AGAINST = ("eval.device",)


@METRICS.register("latency")
class Latency(SampleMetric):
    rows = (
        Row("latency_ms_per_image", "min", "sampling time per image", AGAINST),
        Row("throughput_images_per_s", "max", "images sampled and scored per s", AGAINST),
    )
    every_pass = True

    def finish(self, state: Any, prepared: Any, done: Done) -> Finished:
        if done.sampling is None:  # nothing was sampled: no time to report
            return Finished()
        latency, throughput = 1000 * done.sampling.mean, done.samples / done.wall
        line = (
            f"sampling: {latency:.3f} ms/image per evaluator, {throughput:.1f} images/s over "
            f"{done.evaluators} evaluators on {done.device}"
        )
        metrics = {"latency_ms_per_image": latency, "throughput_images_per_s": throughput}
        return Finished(metrics, lines=(line,))
