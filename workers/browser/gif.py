"""GIF recordings of a browser run: a screenshot per action, assembled with Pillow into one animated GIF."""
import io

from PIL import Image, ImageChops, ImageSequence


class GifRecorder:
    """Frames at most `width` px wide; a frame identical to the previous one is dropped; past
    `max_frames` the newest frame replaces the last kept one, so the recording always ends on the final page."""

    def __init__(self, width=800, max_frames=100, frame_ms=800):
        self.width, self.max_frames, self.frame_ms = max(16, int(width)), max(2, int(max_frames)), frame_ms
        self.frames = []

    def go_on_from(self, gif):
        """Start from the frames of a GIF stored earlier (a run that paused for a code goes on in one GIF)."""
        with Image.open(io.BytesIO(gif)) as stored:
            self.frames = [frame.convert("RGB") for frame in ImageSequence.Iterator(stored)][:self.max_frames]

    def add(self, png):
        image = Image.open(io.BytesIO(png)).convert("RGB")
        if image.width > self.width:
            image = image.resize((self.width, max(1, round(image.height * self.width / image.width))),
                                 Image.LANCZOS)
        if self.frames and self.frames[-1].size == image.size and \
                ImageChops.difference(self.frames[-1], image).getbbox() is None:
            return False
        if len(self.frames) >= self.max_frames:
            self.frames[-1] = image
        else:
            self.frames.append(image)
        return True

    def gif(self):
        """The animated GIF's bytes, or None when nothing was recorded."""
        if not self.frames:
            return None
        size = self.frames[0].size
        # One palette per frame (adaptive) keeps text legible; frames of another size are padded/cropped.
        frames = [f if f.size == size else _fit(f, size) for f in self.frames]
        frames = [f.quantize(colors=256, method=Image.Quantize.MEDIANCUT) for f in frames]
        out = io.BytesIO()
        frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=self.frame_ms,
                       loop=0, optimize=False, disposal=1)
        return out.getvalue()


def _fit(image, size):
    canvas = Image.new("RGB", size, "white")
    canvas.paste(image.crop((0, 0, min(image.width, size[0]), min(image.height, size[1]))), (0, 0))
    return canvas
