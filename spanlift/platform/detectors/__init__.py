"""FID detectors: networks that map [-1, 1] images to features, below fitting and evaluation.

registry               the detectors by name (`load_detector`), each with its weights identity
images                 images as detectors see them (EDM's uint8 protocol)
inception              the EDM/StyleGAN3 Inception-v3
digits_classifier      the digits classifiers' network, spec and torch-fidelity extractor
digits_detector        the digits detector (fitted in by the `digits` feature loss)
digits_eval_detector   an independent digits detector, the digits backbone's FID detector
dinov2                 a DINOv2 from a local Hugging Face folder (the latent loss, fd_dinov2)
train_digits_detector  how the committed digits detectors' weights were trained
weights/               the committed digits detectors' weights
"""
