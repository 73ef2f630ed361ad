"""DeepVM (Kim et al., arXiv:2403.05861): spot + on-demand cluster recommender under an hourly budget.

`data` loads the instance/profile tables, `flopp` ranks instances by FLOPs per dollar, `overheads`
holds the scaling factor SF(n) and the network-saturation lookup, `architectures` enumerates the
single-anchor and tiering configurations, and `optimizer` ranks them and runs the baselines.
"""
