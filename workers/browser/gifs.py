"""Storing a run's GIF: with the task (table task_gifs) and as $DOWNLOAD_DIR/remote-dispatch/<requestId>.gif."""
import os

from app.dispatch.service import store_gif


def gif_path(config, task_id):
    return os.path.join(config["DOWNLOAD_DIR"], "remote-dispatch", f"{task_id}.gif")


def save_gif(task_id, recorder, config):
    """Nothing when no frame was recorded; a task run again (after a pause) replaces its GIF."""
    data = recorder.gif()
    if data is None:
        return None
    store_gif(task_id, data, len(recorder.frames))
    path = gif_path(config, task_id)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".part"
    with open(temporary, "wb") as out:
        out.write(data)
    os.replace(temporary, path)
    return path
