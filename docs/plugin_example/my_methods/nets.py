"""tiny_cnn: a backbone of one's own, here the small CNN with its facts declared again."""
from mutexmatch.models.registry import register_backbone
from mutexmatch.models.small_cnn import SmallCNN


@register_backbone("tiny_cnn", feat_dim=128, param_count=94_762, typical_image_size=16, min_image_size=4,
                   activation_bytes_per_pixel=None, description="the small 3-block CNN under a name of its own")
def tiny_cnn(num_classes: int, in_channels: int) -> SmallCNN:
    return SmallCNN(num_classes, in_channels)
