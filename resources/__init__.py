"""Resources that hand the core its Spark session, catalog and lake."""

from resources.custody import CustodyResource
from resources.spark import SparkResource

__all__ = ["CustodyResource", "SparkResource"]
