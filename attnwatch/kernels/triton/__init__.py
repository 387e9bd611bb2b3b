"""The Triton FlashAttention-2 forward: kernel (`fa2_fwd`), block configurations as data
(`configs.toml`, read by `configs`), and the on-device tuner that picks one per problem (`tuner`).

Only `fa2_fwd` and `tuner` import Triton; `configs` is plain data handling, so the config table
can be read and checked on a host without a GPU.
"""
