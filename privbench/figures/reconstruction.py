"""Reconstruction figures: image quality of the matched reconstructions, their chance levels and gains, images recovered."""
from __future__ import annotations

from privbench.figures.spec import privacy

PSNR_MEAN = privacy("psnr_mean", "PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
PSNR_CHANCE = privacy("psnr_chance", "chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
#: The chance levels behind ``psnr_chance`` (the strongest of them): reconstructions that know nothing of the victim
#: (the test split's mean image, random test images), and ones that know its classes (each class's test mean image).
PSNR_CHANCE_UNINFORMED = privacy("psnr_chance_uninformed", "uninformed chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
PSNR_CHANCE_INFORMED = privacy("psnr_chance_informed", "class-informed chance PSNR (dB)", unit="dB", fmt="{:.2f}", bounds="psnr")
#: Record-level: the share of the message's true images whose matched reconstruction passes metrics.recovered_*.
RECOVERED_FRACTION = privacy("recovered_fraction", "images recovered", fmt="{:.3f}", leak="higher", bounds="unit")
RECOVERED_FRACTION_CHANCE = privacy("recovered_fraction_chance", "chance images recovered", fmt="{:.3f}",
                                     bounds="unit")
PSNR_GAIN = privacy("psnr_gain", "PSNR gain over chance (dB)", unit="dB", fmt="{:+.2f}", leak="higher")
PSNR_MEDIAN = privacy("psnr_median", "median image PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
#: The median matched image's PSNR over the chance PSNR: half the true images are rebuilt at least this far above it.
PSNR_MEDIAN_GAIN = privacy("psnr_median_gain", "median image's gain over chance (dB)", unit="dB", fmt="{:+.2f}",
                            leak="higher")
PSNR_BEST = privacy("psnr_best", "best PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", best="max", bounds="psnr")
SSIM_MEAN = privacy("ssim_mean", "SSIM", fmt="{:.3f}", leak="higher", bounds="signed_unit")
SSIM_CHANCE = privacy("ssim_chance", "chance SSIM", fmt="{:.3f}", bounds="signed_unit")
SSIM_GAIN = privacy("ssim_gain", "SSIM gain", fmt="{:+.3f}", leak="higher", bounds="signed_double")
SSIM_BEST = privacy("ssim_best", "best SSIM", fmt="{:.3f}", leak="higher", best="max")
LPIPS_MEAN = privacy("lpips_mean", "LPIPS", fmt="{:.3g}", leak="lower", bounds="nonnegative")
LPIPS_CHANCE = privacy("lpips_chance", "chance LPIPS", fmt="{:.3g}", bounds="nonnegative")
LPIPS_GAIN = privacy("lpips_gain", "LPIPS gain", fmt="{:+.3g}", leak="higher")
LPIPS_BEST = privacy("lpips_best", "best LPIPS", fmt="{:.3g}", leak="lower", best="min")
MSE_MEAN = privacy("mse_mean", "MSE", fmt="{:.3g}", leak="lower", bounds="nonnegative")
NUM_RECONSTRUCTED = privacy("num_reconstructed", "rebuilt images", fmt="{}", bounds="nonnegative")
NUM_TRUE = privacy("num_true", "true images", fmt="{}", bounds="nonnegative")
LABEL_ACCURACY = privacy("label_accuracy", "label accuracy", fmt="{:.2f}", leak="higher", bounds="unit")
PROJECTION_PSNR_MEAN = privacy("projection_psnr_mean", "projection PSNR (dB)", unit="dB", fmt="{:.2f}", leak="higher", bounds="psnr")
#: An exact attack's certificate (``attack=spear``): rebuilt images it certifies as inputs, and of those the ones
#: whose matched true image is further than 40 dB PSNR away (must be 0: a certificate that is wrong is a defect).
CERTIFIED = privacy("certified_fraction", "images certified", fmt="{:.3f}", leak="higher", bounds="unit")
CERTIFIED_WRONG = privacy("certified_wrong", "certified but wrong", fmt="{}", bounds="nonnegative")
