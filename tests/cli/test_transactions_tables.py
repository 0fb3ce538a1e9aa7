"""`kjbod transactions`' tables, without a cluster: Kafka's ToolsUtils.prettyPrintTable layout (each value padded
to its column's width, then a tab) and kafka-transactions.sh's columns and "None" for what is not there."""

from __future__ import annotations

from kjbod.admin import ProducerState, TransactionDescription, TransactionListing
from kjbod.cli.transactions import describe_table, list_table, producers_table, table


def test_the_table_pads_each_column_and_ends_each_value_with_a_tab():
    assert table(("A", "Longer"), [("xyz", "1")]) == "A  \tLonger\t\nxyz\t1     \t\n"


def test_list_describe_and_producers_tables():
    assert list_table([TransactionListing("tx-1", 2, 5, "Ongoing")]) == (
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t\n"
        "tx-1           \t2          \t5         \tOngoing         \t\n")
    d = TransactionDescription("tx-1", 2, "Ongoing", 5, 0, 60000, 1000, (("t", 0), ("t", 1)))
    header, row = describe_table(d, now_ms=1500).splitlines()
    assert [c.strip() for c in row.split("\t")[:-1]] == ["2", "tx-1", "5", "0", "Ongoing", "60000", "1000", "500",
                                                        "t-0,t-1"]
    idle = TransactionDescription("tx-2", 2, "Empty", 5, 1, 60000, None, ())
    assert [c.strip() for c in describe_table(idle, 0).splitlines()[1].split("\t")[:-1]][6:] == ["None", "None", ""]
    out = producers_table([ProducerState(5, 0, 3, 1700, -1, None), ProducerState(6, 2, 0, 1800, 4, 17)])
    assert [[c.strip() for c in line.split("\t")[:-1]] for line in out.splitlines()] == [
        ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
         "CurrentTransactionStartOffset"],
        ["5", "0", "-1", "3", "1700", "None"], ["6", "2", "4", "0", "1800", "17"]]
