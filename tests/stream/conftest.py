import pytest

from tests.stream.helpers import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):
    """A real redis-server on a free local port for the session (skips the test where none is installed)."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()
