      AND NOT EXISTS (
          SELECT 1 FROM {{table}} AS prev
          WHERE prev.aggregate_id = o.aggregate_id
            AND prev.id < o.id
            AND prev.status <> 'done'
      )
