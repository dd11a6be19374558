"""The Citus cluster the tests start (``-m citus``, ``CODITY_TEST_CITUS=1``): see
codity.bench.citus_cluster, which ``codity bench --citus`` shares."""

from codity.bench.citus_cluster import (
    CitusCluster,
    CitusUnavailable,
    citus_bin_dir,
    cluster_from_environment,
)

__all__ = ["CitusCluster", "CitusUnavailable", "citus_bin_dir", "cluster_from_environment"]
